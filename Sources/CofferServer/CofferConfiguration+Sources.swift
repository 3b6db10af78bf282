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
        try CofferEnvironment.checkNames(environment)
        var providers: [any ConfigProvider] = [commandLine] + CofferEnvironment.providers(environment)
        // The file's own path comes from the flag or the environment only.
        if let path = try await ConfigReader(providers: providers).fetchString(forKey: ConfigKey(CofferSetting.config.key)) {
            providers.append(try await CofferConfigFile.provider(at: path))
        }
        return ConfigReader(providers: providers)
    }

    /// The settings the config file sets that a flag or a `COFFER_*` variable overrides, each
    /// as `"key (config file) is overridden by FLAG or VARIABLE"`: the operator who edits the
    /// file and sees no change is told why (`coffer serve` logs each at start).
    public static func overridden(commandLine: InMemoryProvider, environment: [String: String]) async throws -> [String] {
        let above: [any ConfigProvider] = [commandLine] + CofferEnvironment.providers(environment)
        guard let path = try await ConfigReader(providers: above).fetchString(forKey: ConfigKey(CofferSetting.config.key)),
            let data = FileManager.default.contents(atPath: path),
            let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
        else { return [] }
        let flags = ConfigReader(provider: commandLine)
        var found: [String] = []
        for setting in CofferSetting.all where setting.inConfigFile {
            guard let value = object[setting.key], !(value is NSNull) else { continue }
            let key = ConfigKey(setting.key)
            let flagGiven: Bool
            switch setting.kind {
            case .string: flagGiven = try await flags.fetchString(forKey: key) != nil
            case .integer: flagGiven = try await flags.fetchInt(forKey: key) != nil
            case .list: flagGiven = try await flags.fetchStringArray(forKey: key) != nil
            }
            if flagGiven, let flag = setting.flag {
                found.append("\(setting.key) (config file) is overridden by \(flag)")
            } else if environment[setting.environmentVariable] != nil {
                found.append("\(setting.key) (config file) is overridden by \(setting.environmentVariable)")
            }
        }
        return found
    }
}
