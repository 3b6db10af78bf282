import Foundation

/// A bad `--content-store`, `--s3-endpoint` or `--s3-region`, or missing credentials: the
/// server does not start.
public struct S3ConfigurationError: Error, CustomStringConvertible, Sendable {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// `s3://BUCKET[/PREFIX]`: the bucket, and the key prefix every object of this store lives under.
public struct S3Location: Sendable, Hashable, CustomStringConvertible {
    public var bucket: String
    /// Without leading or trailing `/`; empty for the bucket's root.
    public var prefix: String

    /// Parses `s3://BUCKET[/PREFIX]`. Bucket names follow S3's rules (3–63 characters of
    /// `a–z 0–9 . -`, starting and ending with a letter or digit); the prefix is segments of
    /// `A–Z a–z 0–9 . _ -` joined by `/` (no empty, `.` or `..` segment), at most 512 bytes —
    /// so a key never needs more than S3's own encoding, and never escapes the prefix.
    public init(_ text: String) throws(S3ConfigurationError) {
        guard text.hasPrefix("s3://") else { throw S3ConfigurationError("content store \(text.prefix(80)) is not s3://BUCKET[/PREFIX]") }
        var rest = Substring(text.dropFirst(5))
        while rest.hasSuffix("/") { rest = rest.dropLast() }
        let parts = rest.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        let bucket = String(parts.first ?? "")
        guard Self.isBucketName(bucket) else {
            throw S3ConfigurationError(
                "bucket name \(bucket.prefix(80)) is not valid: 3–63 characters of a–z 0–9 . -, starting and ending with a letter or digit")
        }
        let prefix = parts.count > 1 ? String(parts[1]) : ""
        guard prefix.isEmpty || Self.isPrefix(prefix) else {
            throw S3ConfigurationError("key prefix \(prefix.prefix(80)) is not valid: segments of A–Z a–z 0–9 . _ - joined by /, at most 512 bytes")
        }
        self.bucket = bucket
        self.prefix = prefix
    }

    /// The full key of `name` under the prefix.
    public func key(_ name: String) -> String { prefix.isEmpty ? name : prefix + "/" + name }

    public var description: String { prefix.isEmpty ? "s3://\(bucket)" : "s3://\(bucket)/\(prefix)" }

    static func isBucketName(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard (3...63).contains(bytes.count) else { return false }
        func alphanumeric(_ b: UInt8) -> Bool {
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(b) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b)
        }
        guard let first = bytes.first, let last = bytes.last, alphanumeric(first), alphanumeric(last) else { return false }
        return bytes.allSatisfy { alphanumeric($0) || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: ".") } && !name.contains("..")
    }

    static func isPrefix(_ prefix: String) -> Bool {
        guard prefix.utf8.count <= 512 else { return false }
        return prefix.split(separator: "/", omittingEmptySubsequences: false).allSatisfy { segment in
            !segment.isEmpty && segment != "." && segment != ".."
                && segment.utf8.allSatisfy { b in
                    (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(b) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(b)
                        || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b) || b == UInt8(ascii: "-") || b == UInt8(ascii: "_")
                        || b == UInt8(ascii: ".")
                }
        }
    }
}

/// Where requests for a bucket go. With an endpoint (`--s3-endpoint`, for MinIO, R2, Ceph,
/// moto): path style, `ENDPOINT/BUCKET/KEY`. Without: AWS, virtual-hosted style
/// `https://BUCKET.s3.REGION.amazonaws.com/KEY` (path style on `s3.REGION.amazonaws.com`
/// for a bucket name with dots, which TLS wildcard certificates do not cover).
public struct S3Endpoint: Sendable, Hashable {
    /// `http` or `https`.
    public var scheme: String
    /// The `Host` header: host, and `:port` when not the scheme's default.
    public var host: String
    /// Path of the endpoint itself (an endpoint behind a path prefix), without trailing `/`.
    public var basePath: String
    /// Whether the bucket is the first path segment (else it is in the host name).
    public var pathStyle: Bool
    public var bucket: String

    public init(endpoint: String?, region: String, bucket: String) throws(S3ConfigurationError) {
        guard Self.isRegion(region) else {
            throw S3ConfigurationError("region \(region.prefix(64)) is not valid (for example us-east-1, or auto for R2)")
        }
        self.bucket = bucket
        guard let endpoint else {
            scheme = "https"
            pathStyle = bucket.contains(".")
            host = pathStyle ? "s3.\(region).amazonaws.com" : "\(bucket).s3.\(region).amazonaws.com"
            basePath = ""
            return
        }
        guard let url = URLComponents(string: endpoint), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
            let hostName = url.host, !hostName.isEmpty, url.query == nil, url.fragment == nil, url.user == nil, url.password == nil
        else {
            // Never echo what may be credentials (http://KEY:SECRET@host).
            let shown = endpoint.contains("@") ? "(with user information)" : String(endpoint.prefix(120))
            throw S3ConfigurationError("s3 endpoint \(shown) is not an http(s)://HOST[:PORT][/PATH] URL without user information")
        }
        self.scheme = scheme
        let defaultPort = scheme == "https" ? 443 : 80
        let bracketed = hostName.contains(":") && !hostName.hasPrefix("[") ? "[\(hostName)]" : hostName
        host = url.port.map { $0 == defaultPort ? bracketed : "\(bracketed):\($0)" } ?? bracketed
        var path = url.path
        while path.hasSuffix("/") { path.removeLast() }
        guard path.isEmpty || S3Location.isPrefix(String(path.dropFirst())) else {
            throw S3ConfigurationError("s3 endpoint path \(path.prefix(80)) is not valid")
        }
        basePath = path
        pathStyle = true
    }

    /// The decoded path of `key` (or of the bucket itself when `key` is nil), as signed.
    public func path(key: String?) -> String {
        let bucketPath = pathStyle ? basePath + "/" + bucket : basePath
        guard let key else { return bucketPath.isEmpty ? "/" : bucketPath }
        return bucketPath + "/" + key
    }

    /// The URL of `path` (decoded, as from ``path(key:)``) with an already encoded query.
    public func url(path: String, encodedQuery: String) -> String {
        let encodedPath = SigV4Signer.encode(path, keepSlash: true)
        return "\(scheme)://\(host)\(encodedPath)" + (encodedQuery.isEmpty ? "" : "?" + encodedQuery)
    }

    static func isRegion(_ region: String) -> Bool {
        (1...32).contains(region.utf8.count)
            && region.utf8.allSatisfy { b in
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(b) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b) || b == UInt8(ascii: "-")
            }
    }
}
