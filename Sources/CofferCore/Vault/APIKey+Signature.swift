import Crypto
import Foundation

extension APIKey {
    /// What the ledger key signs for a key: `coffer-api-key-v1\n`, then `keyId`, `name`, `role`,
    /// `secretHash` and `createdAtMs` (whole milliseconds since 1970), each as
    /// `name=<UTF-8 byte count>:<value>\n` like the ledger's canonical bytes, so no value can
    /// pass for another. The revocation is not signed: a revoked key stays revoked because the
    /// database refuses to clear `revoked_at` (the migrations' guard triggers; an owner who drops
    /// them can, which the chained `key.revoke` admin action then shows).
    public var signedBytes: [UInt8] {
        var out = Array("coffer-api-key-v1\n".utf8)
        func field(_ name: String, _ value: String) {
            out.append(contentsOf: name.utf8)
            out.append(UInt8(ascii: "="))
            out.append(contentsOf: String(value.utf8.count).utf8)
            out.append(UInt8(ascii: ":"))
            out.append(contentsOf: value.utf8)
            out.append(UInt8(ascii: "\n"))
        }
        field("keyId", keyId)
        field("name", name)
        field("role", role.rawValue)
        field("secretHash", secretHash)
        field("createdAtMs", String(Self.milliseconds(createdAt)))
        return out
    }

    /// `date` in whole milliseconds since 1970 (a stored REAL or double precision reads back
    /// within a rounding error of where it was written, far below half a millisecond).
    static func milliseconds(_ date: Date) -> Int64 {
        let ms = (date.timeIntervalSince1970 * 1000).rounded()
        return ms.isFinite && abs(ms) < 9e15 ? Int64(ms) : 0
    }

    /// `role 'name' (id)` for logs and terminals, the name and id escaped (``LedgerText``): a
    /// row that fails its signature was written by someone else, and may carry control characters.
    public var displayName: String {
        "\(role.rawValue) '\(LedgerText.escaped(name, maxBytes: 256))' (\(LedgerText.escaped(keyId, maxBytes: 256)))"
    }

    /// Whether this key may be used: its ``signature`` was made by `key` over these very fields.
    /// A key written into the database by anyone without the ledger signing key, changed there
    /// (its role, its secret), or made before keys were signed, fails.
    public func isAuthentic(signedBy key: Curve25519.Signing.PublicKey) -> Bool {
        guard let signature, let raw = Base64.decode(signature), raw.count == 64 else { return false }
        return key.isValidSignature(raw, for: signedBytes)
    }
}

extension LedgerSigner {
    /// `key` signed with the ledger key, its creation time cut to the whole millisecond that is
    /// signed.
    public func signed(_ key: APIKey) throws -> APIKey {
        var out = key
        out.createdAt = Date(timeIntervalSince1970: Double(APIKey.milliseconds(key.createdAt)) / 1000)
        out.signature = Data(try privateKey.signature(for: out.signedBytes)).base64EncodedString()
        return out
    }
}
