import Configuration
import Foundation

extension CofferConfiguration {
    /// The settings of `coffer serve`, highest precedence first: `commandLine`, then the
    /// `COFFER_*` variables of `environment`, then the JSON config file named by `--config` or
    /// `COFFER_CONFIG` (checked: unknown keys and mistyped values are errors). What none of
    /// them sets keeps ``CofferConfiguration``'s default. Read it with ``init(reader:)``.
    ///
    /// `commandLine` holds the flags that were given, under their settings' keys
    /// (``CofferSetting/key``): `coffer` parses its flags with ArgumentParser (help, types,
    /// subcommands) and hands over the values, so a flag that was not given is absent here,
    /// and a repeatable flag given no times is absent too (never an empty list).
    public static func reader(commandLine: InMemoryProvider, environment: [String: String]) async throws -> ConfigReader {
        var providers: [any ConfigProvider] = [commandLine] + CofferEnvironment.providers(environment)
        // The file's own path comes from the flag or the environment only.
        if let path = try await ConfigReader(providers: providers).fetchString(forKey: ConfigKey(CofferSetting.config.key)) {
            providers.append(try await CofferConfigFile.provider(at: path))
        }
        return ConfigReader(providers: providers)
    }
}
