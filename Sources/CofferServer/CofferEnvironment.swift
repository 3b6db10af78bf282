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
