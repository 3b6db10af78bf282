import Configuration
import Foundation

/// The JSON config file (`--config FILE`, `COFFER_CONFIG`) as a configuration provider. It is
/// checked as a whole before it is used: a misspelt key or a value of the wrong type is an
/// error naming the key, never silently ignored (the JSON provider alone would skip both).
enum CofferConfigFile {
    /// The file at `path`, checked, as a provider.
    static func provider(at path: String) async throws -> FileProvider<JSONSnapshot> {
        guard let data = FileManager.default.contents(atPath: path) else { throw CofferConfigurationError("cannot read \(path)") }
        try check(data, path: path)
        do {
            // The provider's own way of being told its file, which keeps `FilePath` (swift-system) out of this module.
            let location = InMemoryProvider(values: ["filePath": ConfigValue(.string(path), isSecret: false)])
            return try await FileProvider<JSONSnapshot>(config: ConfigReader(provider: location))
        } catch {
            throw CofferConfigurationError("\(path) is not a valid config file: \(error)")
        }
    }

    /// A JSON object whose keys are settings (``CofferSetting/configFileKeys``), each of its kind;
    /// `null` stands for an absent key.
    static func check(_ data: Data, path: String) throws {
        let parsed: Any
        do { parsed = try JSONSerialization.jsonObject(with: data) } catch {
            throw CofferConfigurationError("\(path) is not a valid config file: \(error)")
        }
        guard let object = parsed as? [String: Any] else {
            throw CofferConfigurationError("\(path) is not a valid config file: the top level must be an object")
        }
        let unknown = Set(object.keys).subtracting(CofferSetting.configFileKeys)
        guard unknown.isEmpty else { throw CofferConfigurationError("\(path): unknown setting(s) \(unknown.sorted().joined(separator: ", "))") }
        for setting in CofferSetting.all {
            guard let value = object[setting.key], !(value is NSNull) else { continue }
            guard isValid(value, setting.kind) else {
                throw CofferConfigurationError("\(path) is not a valid config file: \(setting.key) must be \(describe(setting.kind))")
            }
        }
    }

    static func isValid(_ value: Any, _ kind: CofferSetting.Kind) -> Bool {
        switch kind {
        case .string: value is String
        case .list: (value as? [Any])?.allSatisfy { $0 is String } ?? false
        // An integral number that fits an Int; not `true` / `false` (NSNumbers too, of their own class).
        case .integer: (value as? NSNumber).map { type(of: $0) != type(of: NSNumber(value: true)) && value as? Int != nil } ?? false
        }
    }

    static func describe(_ kind: CofferSetting.Kind) -> String {
        switch kind {
        case .string: "a string"
        case .integer: "an integer"
        case .list: "an array of strings"
        }
    }
}
