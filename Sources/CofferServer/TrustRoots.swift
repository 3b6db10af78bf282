import CofferCore
import Foundation

/// Turns `--root` / `--environment` values (or `COFFER_ROOTS` / `COFFER_ENVIRONMENTS`, `roots` /
/// `environments` in the config file) into trust anchors; the rules are
/// ``CofferCore/TrustAnchor/anchors(for:environments:)``:
///
/// - no `--root`: Apple's built-in roots, vouching for Production only — Sandbox only when
///   `--environment Sandbox` is given;
/// - `--root FILE`: an Apple root (by fingerprint) as above; any other root for LocalTesting only;
/// - `--root ENV=FILE` (ENV case-insensitive): that root for ENV only; a prefix that is not an
///   environment name is part of the path (`--root ./Sandbox=a.pem` is a file);
/// - `--environment E…`: the accepted environments; each must have a root that vouches for it.
public enum TrustRoots {
    public static func parseEnvironments(_ values: [String]) throws -> Set<Environment> {
        Set(
            try values.map { value in
                guard let env = Environment.allCases.first(where: { $0.rawValue.lowercased() == value.lowercased() }) else {
                    throw CofferConfigurationError("--environment: '\(value)' is not one of Production, Sandbox, Xcode, LocalTesting")
                }
                return env
            })
    }

    /// Reads a certificate as DER or PEM (`-`: standard input).
    public static func certificate(_ path: String) throws -> [UInt8] {
        let bytes = try read(path)
        if bytes.first == 0x30 { return bytes }
        let text = String(decoding: bytes, as: UTF8.self)
        let body = text.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        guard text.contains("-----BEGIN CERTIFICATE-----"), let der = Base64.decode(body) else {
            throw CofferConfigurationError("\(path) is not a DER or PEM certificate")
        }
        return der
    }

    public static func anchors(roots: [String], environments: [String]) throws -> [TrustAnchor] {
        let requested = try parseEnvironments(environments)
        let configured = try roots.map { argument -> ConfiguredRoot in
            let (scope, path) = ConfiguredRoot.parse(argument)
            guard !path.isEmpty else { throw CofferConfigurationError("--root: '\(argument)' names no file") }
            return ConfiguredRoot(scope: scope, der: try certificate(path), name: path)
        }
        do {
            return try TrustAnchor.anchors(for: configured, environments: requested)
        } catch let error as TrustAnchor.ConfigurationError {
            throw CofferConfigurationError(error.description)
        }
    }

    static func read(_ path: String) throws -> [UInt8] {
        if path == "-" { return [UInt8](FileHandle.standardInput.readDataToEndOfFile()) }
        guard let data = FileManager.default.contents(atPath: path) else { throw CofferConfigurationError("cannot read \(path)") }
        return [UInt8](data)
    }
}
