import Crypto
import Foundation

/// What a download token grants: one exact asset version, for one redemption, until a time.
public struct DownloadClaims: Sendable, Hashable {
    public var assetId: String
    /// Lower-case hex SHA-256 of the asset bytes (32 bytes when decoded).
    public var sha256: String
    public var redemptionId: String
    /// Unix seconds.
    public var expiresAt: Int64

    public init(assetId: String, sha256: String, redemptionId: String, expiresAt: Int64) {
        self.assetId = assetId
        self.sha256 = sha256
        self.redemptionId = redemptionId
        self.expiresAt = expiresAt
    }
}

/// An HMAC key with an id, as kept in the data directory's key file.
public struct TokenKey: Sendable {
    public var id: String
    public var key: SymmetricKey

    public init(id: String, key: SymmetricKey) {
        self.id = id
        self.key = key
    }
}

/// Mints and verifies download tokens: `v1.<keyId>.<payload>.<mac>` (base64url parts),
/// HMAC-SHA256 over `v1.<keyId>.<payload>`. New tokens use the active key; retired keys
/// still verify until removed. Tokens are URL-path safe.
///
/// ```swift
/// let signer = TokenSigner(active: key)
/// let token = signer.mint(claims)
/// let claims = try signer.verify(token, now: Date())
/// ```
public struct TokenSigner: Sendable {
    public enum Failure: Error, Sendable, Hashable {
        case invalid
        case expired
    }

    public let active: TokenKey
    /// Each key's HMAC with the key already absorbed: a token costs a copy of it, not the
    /// key schedule (which was half of a verification).
    private let macs: [(id: [UInt8], hmac: HMAC<SHA256>)]
    private let activeMAC: HMAC<SHA256>

    public init(active: TokenKey, retired: [TokenKey] = []) {
        self.active = active
        self.activeMAC = HMAC<SHA256>(key: active.key)
        self.macs =
            [(Array(active.id.utf8), activeMAC)] + retired.filter { $0.id != active.id }.map { (Array($0.id.utf8), HMAC<SHA256>(key: $0.key)) }
    }

    /// Largest accepted token, in characters.
    public static let maxTokenLength = 512

    public func mint(_ claims: DownloadClaims) -> String {
        var payload: [UInt8] = []
        withUnsafeBytes(of: claims.expiresAt.bigEndian) { payload.append(contentsOf: $0) }
        for field in [claims.assetId, claims.sha256, claims.redemptionId] {
            let bytes = Array(field.utf8.prefix(255))
            payload.append(UInt8(bytes.count))
            payload.append(contentsOf: bytes)
        }
        let signed = "v1." + active.id + "." + Base64.encodeURL(payload)
        var hmac = activeMAC
        Array(signed.utf8).withUnsafeBytes { hmac.update(data: $0) }
        return signed + "." + Base64.encodeURL(hmac.finalize())
    }

    public func verify(_ token: String, now: Date) throws(Failure) -> DownloadClaims {
        var token = token
        token.makeContiguousUTF8()  // a no-op for native strings, which all tokens from HTTP are
        let outcome = token.utf8.withContiguousStorageIfAvailable { verify(bytes: $0, now: Int64(now.timeIntervalSince1970)) }
        guard let outcome else { throw .invalid }
        return try outcome.get()
    }

    /// The hot path of every download: no allocation but the three claim strings. Hashing is
    /// ~0.4 µs of it; the rest is parsing.
    private func verify(bytes: UnsafeBufferPointer<UInt8>, now: Int64) -> Result<DownloadClaims, Failure> {
        guard bytes.count <= Self.maxTokenLength else { return .failure(.invalid) }
        // Exactly three dots: v1 . keyId . payload . mac
        var dots = (0, 0, 0)
        var found = 0
        for i in bytes.indices where bytes[i] == 0x2E {
            switch found {
            case 0: dots.0 = i
            case 1: dots.1 = i
            case 2: dots.2 = i
            default: return .failure(.invalid)
            }
            found += 1
        }
        guard found == 3, dots.0 == 2, bytes[0] == UInt8(ascii: "v"), bytes[1] == UInt8(ascii: "1") else { return .failure(.invalid) }
        let keyId = UnsafeBufferPointer(rebasing: bytes[(dots.0 + 1)..<dots.1])
        guard var hmac = macs.first(where: { $0.id.elementsEqual(keyId) })?.hmac else { return .failure(.invalid) }
        // The MAC: 43 base64url characters for 32 bytes.
        let macText = UnsafeBufferPointer(rebasing: bytes[(dots.2 + 1)...])
        let macValid = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Base64.decodedCapacity(43)) { mac -> Bool in
            guard macText.count == 43, Base64.decodeURL(macText, into: mac) == SHA256.byteCount else { return false }
            hmac.update(data: UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: bytes[0..<dots.2])))
            // HashedAuthenticationCode's == is a constant-time comparison.
            return hmac.finalize() == UnsafeRawBufferPointer(start: mac.baseAddress, count: SHA256.byteCount)
        }
        guard macValid else { return .failure(.invalid) }
        let payloadText = UnsafeBufferPointer(rebasing: bytes[(dots.1 + 1)..<dots.2])
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Base64.decodedCapacity(payloadText.count)) { buffer in
            guard let count = Base64.decodeURL(payloadText, into: buffer), count >= 8 else { return .failure(.invalid) }
            let payload = UnsafeBufferPointer(rebasing: buffer[0..<count])
            var expires: Int64 = 0
            for byte in payload[0..<8] { expires = (expires << 8) | Int64(byte) }
            var fields = ("", "", "")
            var index = 8
            for n in 0..<3 {
                guard index < payload.count else { return .failure(.invalid) }
                let length = Int(payload[index])
                index += 1
                guard payload.count - index >= length else { return .failure(.invalid) }
                // Strict UTF-8: a lossy decode would let two payloads name the same claims.
                guard let field = String(validating: payload[index..<(index + length)], as: UTF8.self) else { return .failure(.invalid) }
                switch n {
                case 0: fields.0 = field
                case 1: fields.1 = field
                default: fields.2 = field
                }
                index += length
            }
            guard index == payload.count else { return .failure(.invalid) }
            guard now < expires else { return .failure(.expired) }
            return .success(DownloadClaims(assetId: fields.0, sha256: fields.1, redemptionId: fields.2, expiresAt: expires))
        }
    }
}
