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
        let bytes = Array(token.utf8)
        guard bytes.count <= Self.maxTokenLength else { throw .invalid }
        let parts = bytes.split(separator: 0x2E, omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0].elementsEqual("v1".utf8) else { throw .invalid }
        guard var hmac = macs.first(where: { $0.id.elementsEqual(parts[1]) })?.hmac,
            let mac = Base64.decode(bytes: parts[3], url: true), mac.count == SHA256.byteCount
        else { throw .invalid }
        bytes.withUnsafeBytes { hmac.update(data: UnsafeRawBufferPointer(rebasing: $0[0..<(parts[3].startIndex - 1)])) }
        // HashedAuthenticationCode's == is a constant-time comparison.
        guard hmac.finalize() == mac else { throw .invalid }
        guard let payload = Base64.decode(bytes: parts[2], url: true), payload.count >= 8 else { throw .invalid }
        var expires: Int64 = 0
        for byte in payload[0..<8] { expires = (expires << 8) | Int64(byte) }
        var fields: [String] = []
        var index = 8
        for _ in 0..<3 {
            guard index < payload.count else { throw .invalid }
            let length = Int(payload[index])
            index += 1
            guard payload.count - index >= length else { throw .invalid }
            // Strict UTF-8: a lossy decode would let two payloads name the same claims.
            guard let field = String(validating: payload[index..<(index + length)], as: UTF8.self) else { throw .invalid }
            fields.append(field)
            index += length
        }
        guard index == payload.count else { throw .invalid }
        guard Int64(now.timeIntervalSince1970) < expires else { throw .expired }
        return DownloadClaims(assetId: fields[0], sha256: fields[1], redemptionId: fields[2], expiresAt: expires)
    }
}
