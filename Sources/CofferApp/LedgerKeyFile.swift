import CofferCore
import Crypto
import Foundation

/// The ledger checkpoint signing key in `DATA/keys/ledger-signing.key` (0600): base64 of a
/// raw Ed25519 private key, created on first start. Its public half is served at
/// `GET /v1/audit/public-key` and printed by `coffer ledger public-key`; auditors keep a copy
/// apart from the server.
public enum LedgerKeyFile {
    public static func path(dataDirectory: String) -> String {
        DataDirectory(dataDirectory).ledgerKey
    }

    /// Where the signing key was found.
    public struct Resolved: Sendable {
        public var signer: LedgerSigner
        public var path: String
        public var insideDataDirectory: Bool
    }

    /// The signing key the server uses: `configured` (`--ledger-key FILE`, which must exist),
    /// else systemd's `$CREDENTIALS_DIRECTORY/ledger-signing.key` when present, else the data
    /// directory's key (created on first start).
    public static func resolve(
        dataDirectory: String, configured: String?, environment: [String: String] = ProcessInfo.processInfo.environment, create: Bool = true
    ) throws -> Resolved {
        if let configured {
            return Resolved(signer: try load(configured), path: configured, insideDataDirectory: false)
        }
        if let credentials = environment["CREDENTIALS_DIRECTORY"] {
            let path = DataDirectory.ledgerKey(inCredentials: credentials)
            if FileManager.default.fileExists(atPath: path) {
                return Resolved(signer: try load(path), path: path, insideDataDirectory: false)
            }
        }
        return Resolved(
            signer: try signer(dataDirectory: dataDirectory, create: create), path: path(dataDirectory: dataDirectory), insideDataDirectory: true)
    }

    /// Reads a key file (base64 of a raw Ed25519 private key).
    public static func load(_ path: String) throws -> LedgerSigner {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw TokenKeyFile.KeyError(description: "cannot read the ledger signing key \(path)")
        }
        guard let raw = Base64.decode(String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)),
            let key = try? Curve25519.Signing.PrivateKey(rawRepresentation: raw)
        else { throw TokenKeyFile.KeyError(description: "\(path) is not an Ed25519 key file (base64 of 32 bytes)") }
        return LedgerSigner(privateKey: key)
    }

    /// Writes a new key file (0600 from its first byte, flushed); refuses to overwrite one.
    public static func create(at path: String) throws -> LedgerSigner {
        guard let signer = try createUnlessExists(at: path) else { throw TokenKeyFile.KeyError(description: "\(path) exists: not overwritten") }
        return signer
    }

    /// A new key at `path`; nil when a file is there already (or another process created one first).
    static func createUnlessExists(at path: String) throws -> LedgerSigner? {
        let key = Curve25519.Signing.PrivateKey()
        guard try SecretFile.create(path, contents: Data((key.rawRepresentation.base64EncodedString() + "\n").utf8)) else { return nil }
        return LedgerSigner(privateKey: key)
    }

    /// Loads the key, creating it when `create` and it does not exist.
    public static func signer(dataDirectory: String, create: Bool = true) throws -> LedgerSigner {
        let path = path(dataDirectory: dataDirectory)
        if !FileManager.default.fileExists(atPath: path) {
            guard create else { throw TokenKeyFile.KeyError(description: "\(path) does not exist") }
            try FileManager.default.createDirectory(
                atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            // Another instance starting on the same directory may create it first: then its key is the one.
            if let created = try createUnlessExists(at: path) { return created }
        }
        return try load(path)
    }
}
