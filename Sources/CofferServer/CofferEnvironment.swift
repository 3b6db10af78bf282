import Configuration
import Foundation

/// The `COFFER_*` environment variables as configuration providers: each setting's key is
/// mapped to its variable (`dataDirectory` → `COFFER_DATA_DIR`, see ``CofferSetting``), and
/// `COFFER_TOKEN_KEY` is a secret.
///
/// Comma lists keep their documented reading: entries are trimmed and empty entries dropped
/// (`"a, ,b,"` is `a`, `b`), and a variable that is set but lists nothing (`""`) is an empty
/// list that hides the config file's. `EnvironmentVariablesProvider` would keep empty entries,
/// so list values are normalised before it sees them, and the empty lists — which no string
/// can spell for it — come from a small in-memory provider in front of it.
enum CofferEnvironment {
    /// `COFFER_*` variables that are not server settings: the client's (`COFFER_KEY`,
    /// `COFFER_SERVER`, `COFFER_URL`), the console's and the scripts' (`COFFER_CONSOLE_DIR`,
    /// `COFFER_BIN`, `COFFER_TEST_…`).
    static let otherVariables: Set<String> = ["COFFER_KEY", "COFFER_SERVER", "COFFER_URL", "COFFER_CONSOLE_DIR", "COFFER_BIN"]

    /// Refuses a `COFFER_*` variable that names no setting: the flags are singular where the
    /// variables are plural (`--trusted-proxy`, `COFFER_TRUSTED_PROXIES`), and a misspelt one was
    /// ignored — `COFFER_TRUSTED_PROXY` left every client with nginx's address, `COFFER_LEGACY_RECEIPT`
    /// kept legacy receipts accepted — while unknown config-file keys were already refused.
    static func checkNames(_ environment: [String: String]) throws {
        let known = Set(CofferSetting.all.map(\.environmentVariable)).union(otherVariables)
        let unknown = environment.keys.filter { $0.hasPrefix("COFFER_") && !$0.hasPrefix("COFFER_TEST_") && !known.contains($0) }.sorted()
        guard let first = unknown.first else { return }
        let near = known.filter { $0.hasPrefix(first) || first.hasPrefix($0) || $0.hasPrefix(String(first.dropLast())) }.sorted()
        throw CofferConfigurationError(
            "unknown environment variable\(unknown.count == 1 ? "" : "s") \(unknown.joined(separator: ", "))"
                + (near.isEmpty ? "" : " (did you mean \(near.joined(separator: " or "))?)")
                + "; every setting's variable is listed in the README's configuration table")
    }

    /// Highest precedence first.
    static func providers(_ environment: [String: String]) -> [any ConfigProvider] {
        var variables = environment
        var emptyLists: [AbsoluteConfigKey: ConfigValue] = [:]
        for setting in CofferSetting.all where setting.kind == .list {
            guard let value = environment[setting.environmentVariable] else { continue }
            let entries = list(value)
            if entries.isEmpty {
                variables[setting.environmentVariable] = nil
                emptyLists[AbsoluteConfigKey([setting.key])] = ConfigValue(.stringArray([]), isSecret: false)
            } else {
                variables[setting.environmentVariable] = entries.joined(separator: ",")
            }
        }
        let secrets = Set(CofferSetting.all.filter(\.isSecret).map(\.environmentVariable))
        let variablesProvider = EnvironmentVariablesProvider(environmentVariables: variables, secretsSpecifier: .specific(secrets))
        return [
            InMemoryProvider(name: "environment (empty lists)", values: emptyLists),
            variablesProvider.mapKeys { key in AbsoluteConfigKey([variableName(key)]) },
        ]
    }

    /// The variable that holds `key`: a setting's documented name, else `COFFER_` and the key's
    /// components in capitals.
    static func variableName(_ key: AbsoluteConfigKey) -> String {
        let name = key.components.joined(separator: ".")
        if let setting = CofferSetting.all.first(where: { $0.key == name }) { return setting.environmentVariable }
        return (["COFFER"] + key.components.map { $0.uppercased() }).joined(separator: "_")
    }

    /// A comma list's entries, trimmed, empty ones dropped.
    static func list(_ value: String) -> [String] {
        value.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }
}
