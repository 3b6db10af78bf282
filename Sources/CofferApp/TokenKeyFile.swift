import CofferCore
import Crypto
import Foundation

/// The download-token keys in `DATA/keys/download-tokens.json` (0600), created on first start.
/// To rotate: add a key and make it active; older keys keep verifying until removed.
public enum TokenKeyFile {
    struct File: Codable {
        struct Entry: Codable {
            var id: String
            var secret: String
        }
        var active: String
        var keys: [Entry]
    }

    public struct KeyError: Error, CustomStringConvertible {
        public var description: String
    }

    public static func signer(dataDirectory: String, configured: String?) throws -> TokenSigner {
        if let configured {
            guard let bytes = Base64.decode(configured), bytes.count >= 32 else {
                throw KeyError(description: "the configured token key must be base64 of at least 32 bytes")
            }
            return TokenSigner(active: TokenKey(id: "cfg", key: SymmetricKey(data: bytes)))
        }
        let directory = DataDirectory(dataDirectory)
        let path = directory.tokenKeys
        let fm = FileManager.default
        if !fm.fileExists(atPath: path) {
            try fm.createDirectory(atPath: directory.keys, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            let secret = SymmetricKey(size: .bits256).withUnsafeBytes { Data($0).base64EncodedString() }
            let file = File(active: "k1", keys: [.init(id: "k1", secret: secret)])
            // Another instance starting on the same directory may create it first: its key is read below.
            _ = try SecretFile.create(path, contents: try JSONEncoder().encode(file))
        }
        guard let data = fm.contents(atPath: path), let file = try? JSONDecoder().decode(File.self, from: data) else {
            throw KeyError(description: "\(path) is not a token key file")
        }
        var keys: [TokenKey] = []
        for entry in file.keys {
            // The id is copied into every token and so into its URL (/v1/downloads/v1.<id>.…): a
            // dot would split it, and an empty one names nothing.
            guard (1...64).contains(entry.id.utf8.count), entry.id.utf8.allSatisfy({ $0 > 0x20 && $0 != 0x2E && $0 < 0x7F }) else {
                throw KeyError(
                    description:
                        "\(path): key id \(LedgerText.escaped(entry.id, maxBytes: 72)) must be 1–64 printable ASCII characters without spaces or dots"
                )
            }
            guard let bytes = Base64.decode(entry.secret), bytes.count >= 32 else {
                throw KeyError(description: "\(path): key \(entry.id) must be base64 of at least 32 bytes")
            }
            keys.append(TokenKey(id: entry.id, key: SymmetricKey(data: bytes)))
        }
        guard let active = keys.first(where: { $0.id == file.active }) else {
            throw KeyError(description: "\(path): active key \(file.active) is not listed")
        }
        // The active key's id goes into every new token's URL: a slash, `%`, `?` or `#` there
        // would make every token of a rotation unusable. (A retired key's tokens were issued
        // already: its id may stay as it was.)
        guard active.id.utf8.allSatisfy(Self.isIdByte) else {
            throw KeyError(
                description:
                    "\(path): the active key's id \(LedgerText.escaped(active.id, maxBytes: 72)) must be A–Z a–z 0–9 _ - ~ only: it is part of every download URL"
            )
        }
        return TokenSigner(active: active, retired: keys.filter { $0.id != file.active })
    }

    /// A–Z, a–z, 0–9, `_`, `-` and `~` (RFC 3986's unreserved characters but the dot): what
    /// the active key's id may hold.
    static func isIdByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"),
            UInt8(ascii: "-"), UInt8(ascii: "~"):
            true
        default: false
        }
    }
}
