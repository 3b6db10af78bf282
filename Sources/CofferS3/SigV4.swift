import CofferCore
import Crypto
import Foundation
import Synchronization

/// Credentials for an S3-compatible object store (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
/// `AWS_SESSION_TOKEN` for temporary credentials).
public struct S3Credentials: Sendable {
    public var accessKeyId: String
    public var secretAccessKey: String
    public var sessionToken: String?

    public init(accessKeyId: String, secretAccessKey: String, sessionToken: String? = nil) {
        self.accessKeyId = accessKeyId
        self.secretAccessKey = secretAccessKey
        self.sessionToken = sessionToken
    }
}

/// AWS Signature Version 4 (`AWS4-HMAC-SHA256`) for S3: the `Authorization` header of a
/// request, and presigned URLs (query authentication). Pure: no clock, no I/O — the caller
/// passes the time. Written here because no S3 SDK is in the package mirror; checked against
/// AWS's documented example signatures (`SigV4Tests`).
///
/// S3's rules, where they differ from other services: the path is encoded once (not
/// normalised, not encoded twice), and the payload hash is sent as `x-amz-content-sha256`.
public struct SigV4Signer: Sendable {
    public static let algorithm = "AWS4-HMAC-SHA256"
    /// The payload hash of a presigned URL, or of a request whose body is not hashed.
    public static let unsignedPayload = "UNSIGNED-PAYLOAD"
    /// SHA-256 of the empty string, hex.
    public static let emptyPayload = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    public let credentials: S3Credentials
    public let region: String
    public let service: String
    /// The signing key of the last day used: it depends only on the day, region, service
    /// and secret, and deriving it is four HMACs — most of a presigned URL's cost.
    private let keys = SigningKeyCache()

    public init(credentials: S3Credentials, region: String, service: String = "s3") {
        self.credentials = credentials
        self.region = region
        self.service = service
    }

    /// The headers to add to a request for it to be authenticated: `x-amz-date`,
    /// `x-amz-content-sha256`, `x-amz-security-token` (temporary credentials) and
    /// `Authorization`. `headers` are the request's other headers, `host` among them; all
    /// are signed. `path` is the decoded path (`/bucket/key`), `query` the decoded parameters.
    public func sign(
        method: String, path: String, query: [(String, String)] = [], headers: [(String, String)], payloadSHA256: String, date: Date
    ) -> [(String, String)] {
        let stamp = Stamp(date)
        var added: [(String, String)] = [("x-amz-date", stamp.time), ("x-amz-content-sha256", payloadSHA256)]
        if let token = credentials.sessionToken { added.append(("x-amz-security-token", token)) }
        let canonical = Self.canonicalHeaders(headers + added)
        let request = Self.canonicalRequest(
            method: method, path: path, query: Self.canonicalQuery(query), headers: canonical, payloadSHA256: payloadSHA256)
        let signature = self.signature(of: request, stamp: stamp)
        added.append(
            (
                "Authorization",
                "\(Self.algorithm) Credential=\(credentials.accessKeyId)/\(scope(stamp)), SignedHeaders=\(canonical.signed), Signature=\(signature)"
            ))
        return added
    }

    /// The query string of a presigned URL for `method path` on `host`, valid `expires` seconds
    /// from `date` (1 to 604,800): the request's own `query` (for example
    /// `response-content-type`) and the authentication parameters, signature last. Only `host`
    /// is signed, so the holder may add headers such as `Range`.
    public func presignedQuery(method: String, path: String, query: [(String, String)] = [], host: String, expires: Int, date: Date) -> String {
        let stamp = Stamp(date)
        var parameters = query
        parameters.append(("X-Amz-Algorithm", Self.algorithm))
        parameters.append(("X-Amz-Credential", "\(credentials.accessKeyId)/\(scope(stamp))"))
        parameters.append(("X-Amz-Date", stamp.time))
        parameters.append(("X-Amz-Expires", String(min(max(expires, 1), 604_800))))
        if let token = credentials.sessionToken { parameters.append(("X-Amz-Security-Token", token)) }
        parameters.append(("X-Amz-SignedHeaders", "host"))
        let canonicalQuery = Self.canonicalQuery(parameters)
        let request = Self.canonicalRequest(
            method: method, path: path, query: canonicalQuery, headers: Self.canonicalHeaders([("host", host)]),
            payloadSHA256: Self.unsignedPayload)
        return canonicalQuery + "&X-Amz-Signature=" + signature(of: request, stamp: stamp)
    }

    // MARK: - The steps (internal for the tests, which check each against AWS's examples)

    struct Stamp {
        /// `YYYYMMDD`
        var day: String
        /// `YYYYMMDD'T'HHMMSS'Z'`
        var time: String

        init(_ date: Date) {
            var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
            var parts = tm()
            gmtime_r(&seconds, &parts)
            func padded(_ value: Int32, _ width: Int) -> String {
                let digits = String(value)
                return String(repeating: "0", count: max(0, width - digits.count)) + digits
            }
            day = padded(parts.tm_year + 1900, 4) + padded(parts.tm_mon + 1, 2) + padded(parts.tm_mday, 2)
            time = day + "T" + padded(parts.tm_hour, 2) + padded(parts.tm_min, 2) + padded(parts.tm_sec, 2) + "Z"
        }
    }

    /// SHA-256 of `data`, lower-case hex: the payload hash of a body held in memory.
    public static func hexSHA256(_ data: Data) -> String { SHA256.hash(data: data).hexString }

    func scope(_ stamp: Stamp) -> String { "\(stamp.day)/\(region)/\(service)/aws4_request" }

    struct CanonicalHeaders {
        /// `name:value\n` for each header, by name.
        var block: String
        /// The names, `;`-separated.
        var signed: String
    }

    /// Names lowercased, values trimmed with inner runs of spaces and tabs made one space, a repeated name's
    /// values joined by commas in the order given; sorted by name.
    static func canonicalHeaders(_ headers: [(String, String)]) -> CanonicalHeaders {
        var byName: [String: [String]] = [:]
        for (name, value) in headers {
            let trimmed = value.split(whereSeparator: { $0 == " " || $0 == "\t" }).joined(separator: " ")
            byName[name.lowercased(), default: []].append(trimmed)
        }
        let names = byName.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        let block = names.map { "\($0):\(byName[$0, default: []].joined(separator: ","))\n" }.joined()
        return CanonicalHeaders(block: block, signed: names.joined(separator: ";"))
    }

    /// Each name and value encoded (`/` too), sorted by name then value, byte order.
    static func canonicalQuery(_ query: [(String, String)]) -> String {
        // Byte order, compared in place (an array per comparison cost a presigned URL a third of its time).
        query.map { (encode($0.0, keepSlash: false), encode($0.1, keepSlash: false)) }
            .sorted { a, b in a.0 == b.0 ? a.1.utf8.lexicographicallyPrecedes(b.1.utf8) : a.0.utf8.lexicographicallyPrecedes(b.0.utf8) }
            .map { $0.0 + "=" + $0.1 }.joined(separator: "&")
    }

    static func canonicalRequest(method: String, path: String, query: String, headers: CanonicalHeaders, payloadSHA256: String) -> String {
        let uri = path.isEmpty ? "/" : encode(path, keepSlash: true)
        return "\(method)\n\(uri)\n\(query)\n\(headers.block)\n\(headers.signed)\n\(payloadSHA256)"
    }

    func stringToSign(_ canonicalRequest: String, stamp: Stamp) -> String {
        "\(Self.algorithm)\n\(stamp.time)\n\(scope(stamp))\n\(SHA256.hash(data: Data(canonicalRequest.utf8)).hexString)"
    }

    func signature(of canonicalRequest: String, stamp: Stamp) -> String {
        let key = keys.key(day: stamp.day) {
            var key = SymmetricKey(data: Data("AWS4\(credentials.secretAccessKey)".utf8))
            for part in [stamp.day, region, service, "aws4_request"] {
                key = SymmetricKey(data: Data(HMAC<SHA256>.authenticationCode(for: Data(part.utf8), using: key)))
            }
            return key
        }
        return HMAC<SHA256>.authenticationCode(for: Data(stringToSign(canonicalRequest, stamp: stamp).utf8), using: key).hexString
    }

    /// RFC 3986 percent-encoding (``PercentEncoding``); `/` kept in a path.
    static func encode(_ text: String, keepSlash: Bool) -> String { PercentEncoding.encode(text, keepSlash: keepSlash) }
}

/// One signer's derived key, for the day it was derived for.
final class SigningKeyCache: Sendable {
    private let cached = Mutex<(day: String, key: SymmetricKey)?>(nil)

    func key(day: String, derive: () -> SymmetricKey) -> SymmetricKey {
        if let hit = cached.withLock({ $0 }), hit.day == day { return hit.key }
        let key = derive()
        cached.withLock { $0 = (day, key) }
        return key
    }
}
