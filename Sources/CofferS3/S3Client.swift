import AsyncHTTPClient
import Crypto
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// How long any call to the object store may take: a stalled or unreachable store never
/// holds a request (or the client behind it) for longer.
public struct S3Timeouts: Sendable, Hashable {
    /// Opening a connection (TCP and TLS).
    public var connect: Duration
    /// From sending the request to the response's head (for an upload, the whole body is sent in this time).
    public var response: Duration
    /// The longest pause between two reads of a response body, or two writes of a request body.
    public var idle: Duration
    /// A streamed download's body must come at least this fast on average (bytes/s), counting
    /// only the time spent waiting for the store — never the time the client takes to read —
    /// after ``response`` of grace: a store that trickles (each pause under ``idle``) cannot
    /// hold a download forever.
    public var minimumRate: Int64

    public init(
        connect: Duration = .seconds(5), response: Duration = .seconds(60), idle: Duration = .seconds(30), minimumRate: Int64 = 16 * 1024
    ) {
        self.connect = connect
        self.response = response
        self.idle = idle
        self.minimumRate = max(1, minimumRate)
    }
}

/// Why a call to the object store failed.
public enum S3Error: Error, Sendable, CustomStringConvertible {
    /// The store could not be reached, timed out, or answered 5xx (`SlowDown`,
    /// `InternalError`): worth retrying later.
    case unavailable(String)
    /// The store refused the request with a 4xx (credentials, signature, permissions, a
    /// missing bucket): a configuration problem, not the client's.
    case refused(status: Int, code: String, message: String)
    /// No such key.
    case notFound
    /// An answer S3 does not give (unparseable XML, a short body, a wrong range).
    case malformedResponse(String)

    public var description: String {
        switch self {
        case .unavailable(let detail): "object store unavailable: \(detail)"
        case .refused(let status, let code, let message): "object store refused the request: \(status) \(code) \(message)"
        case .notFound: "no such object"
        case .malformedResponse(let detail): "object store answered unexpectedly: \(detail)"
        }
    }
}

/// An S3 client for one bucket (and key prefix): the calls a content store needs, signed with
/// ``SigV4Signer`` and sent over AsyncHTTPClient, each bounded by ``S3Timeouts``. No S3 SDK is
/// in the package mirror, so this is ours; it speaks the REST API as AWS documents it and as
/// MinIO, R2, Ceph and moto implement it.
public final class S3Client: Sendable {
    public let location: S3Location
    public let endpoint: S3Endpoint
    public let region: String
    let signer: SigV4Signer
    let http: HTTPClient
    let timeouts: S3Timeouts
    let logger: Logger
    /// Largest XML answer read (a list page of 1,000 keys is ~300 KiB).
    static let maxXMLBytes = 4 * 1024 * 1024

    public init(
        location: S3Location, endpoint: String?, region: String, credentials: S3Credentials, timeouts: S3Timeouts = S3Timeouts(),
        logger: Logger = Logger(label: "coffer.s3")
    ) throws(S3ConfigurationError) {
        guard !credentials.accessKeyId.isEmpty, !credentials.secretAccessKey.isEmpty else {
            throw S3ConfigurationError("the object store needs credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
        }
        self.location = location
        self.endpoint = try S3Endpoint(endpoint: endpoint, region: region, bucket: location.bucket)
        self.region = region
        self.signer = SigV4Signer(credentials: credentials, region: region)
        self.timeouts = timeouts
        self.logger = logger
        var configuration = HTTPClient.Configuration()
        configuration.timeout = .init(connect: .init(timeouts.connect), read: .init(timeouts.idle))
        configuration.timeout.write = .init(timeouts.idle)
        configuration.redirectConfiguration = .disallow
        configuration.decompression = .disabled
        configuration.connectionPool = .init(idleTimeout: .seconds(30), concurrentHTTP1ConnectionsPerHostSoftLimit: Self.connectionLimit)
        http = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    }

    /// Connections to the store at once. A request that finds them all leased waits (it does
    /// not open another), so the streamed reads (``S3ContentStore/maxConcurrentReads``) must
    /// leave room: with 64, the 65th long download queued every size check, upload and listing
    /// behind the streams until each failed its deadline.
    public static let connectionLimit = 320

    /// S3 answers in UTF-8 and never sends a DTD: entity games are refused before libxml2 sees
    /// them — also in UTF-16 (a BOM, NUL bytes), where a byte search for `<!DOCTYPE` finds nothing.
    static func checkXML(_ bytes: some Collection<UInt8>) throws {
        guard !bytes.contains(0), String(validating: bytes, as: UTF8.self) != nil else {
            throw S3Error.malformedResponse("an answer that is not UTF-8")
        }
        guard bytes.firstRange(of: Array("<!DOCTYPE".utf8)) == nil, bytes.firstRange(of: Array("<!ENTITY".utf8)) == nil else {
            throw S3Error.malformedResponse("an answer with a DTD")
        }
    }

    /// Closes the connections. Call once, when no call is in flight.
    public func shutdown() async throws { try await http.shutdown() }

    // MARK: - Objects

    /// The object's size, last modification and ETag; nil when there is no such key.
    public func head(_ key: String) async throws -> (size: Int64, lastModified: Date?, eTag: String?)? {
        do {
            let response = try await send(.HEAD, key: key)
            guard let length = response.headers.first(name: "content-length").flatMap(Int64.init), length >= 0 else {
                throw S3Error.malformedResponse("HEAD without a Content-Length")
            }
            return (
                length, response.headers.first(name: "last-modified").flatMap(Self.httpDate), Self.tag(response.headers.first(name: "etag"))
            )
        } catch S3Error.notFound {
            return nil
        }
    }

    /// An answered GET: the body still to read, the version's ETag, and the whole object's
    /// size (from `Content-Range`, or the length of a 200).
    public struct Got: Sendable {
        public var body: HTTPClientResponse.Body
        public var eTag: String?
        public var size: Int64?
    }

    /// The bytes `range` (inclusive) of the object. The response's head is awaited and checked
    /// here — a missing key throws ``S3Error/notFound``, a failing store its error, an answer
    /// for other bytes (status, `Content-Length`, `Content-Range`) ``S3Error/malformedResponse(_:)``
    /// — before any byte is read; the body is then pulled as the consumer reads it (never
    /// buffered whole), each pause bounded by the idle timeout. `ifMatch`: only that version of
    /// the object (another one is 412 ``S3Error/refused(status:code:message:)``).
    public func get(_ key: String, range: ClosedRange<Int64>, ifMatch: String? = nil) async throws -> Got {
        var headers = [("range", "bytes=\(range.lowerBound)-\(range.upperBound)")]
        if let ifMatch { headers.append(("if-match", "\"\(ifMatch)\"")) }
        let response = try await send(.GET, key: key, headers: headers)
        let expected = range.upperBound - range.lowerBound + 1
        let length = response.headers.first(name: "content-length").flatMap(Int64.init)
        let contentRange = response.headers.first(name: "content-range") ?? ""
        let prefix = "bytes \(range.lowerBound)-\(range.upperBound)/"
        let ranged = response.status == .partialContent && contentRange.hasPrefix(prefix)
        // A whole object answered with 200 is the range 0…size-1 only.
        let whole = response.status == .ok && range.lowerBound == 0
        guard (ranged || whole) && length == expected else {
            throw S3Error.malformedResponse(
                "GET bytes \(range.lowerBound)-\(range.upperBound) answered \(response.status.code), length \(length.map(String.init) ?? "none"), range \(contentRange.prefix(80))"
            )
        }
        let size = whole ? length : Int64(contentRange.dropFirst(prefix.count))
        return Got(body: response.body, eTag: Self.tag(response.headers.first(name: "etag")), size: size)
    }

    /// An ETag as a pin keeps it, without its quotes (a header has them, some stores' XML
    /// not): 1–256 characters, else nil. ``get(_:range:ifMatch:)`` quotes it again. A weak
    /// one (`W/`, from a proxy that re-encodes) is nil: it never matches `If-Match`.
    static func tag(_ text: String?) -> String? {
        guard var text = text?.trimmingCharacters(in: .whitespaces), !text.hasPrefix("W/") else { return nil }
        if text.count >= 2, text.hasPrefix("\""), text.hasSuffix("\"") { text = String(text.dropFirst().dropLast()) }
        guard !text.isEmpty, text.utf8.count <= 256, !text.contains("\"") else { return nil }
        return text
    }

    /// Stores `body` under `key` in one request, its SHA-256 sent both as the signed payload
    /// hash and as `x-amz-checksum-sha256` (the store refuses the body if either differs).
    /// Returns the new object's ETag.
    @discardableResult
    public func put(_ key: String, body: ByteBuffer, sha256: SHA256.Digest, contentType: String = "application/octet-stream") async throws
        -> String?
    {
        let response = try await send(
            .PUT, key: key,
            headers: [("content-type", contentType), ("x-amz-checksum-sha256", Data(sha256).base64EncodedString())],
            body: body, payloadSHA256: sha256.hexString)
        return Self.tag(response.headers.first(name: "etag"))
    }

    /// Deletes `key` (no error when it does not exist).
    public func delete(_ key: String) async throws {
        do { _ = try await send(.DELETE, key: key) } catch S3Error.notFound {}
    }

    /// Copies `source` (a key of this bucket) to `key`, inside the store (up to 5 GiB); returns the copy's ETag.
    /// `ifMatch`: only that version of the source (`x-amz-copy-source-if-match`; 412 otherwise).
    @discardableResult
    public func copy(from source: String, to key: String, ifMatch: String? = nil) async throws -> String? {
        var headers = [("x-amz-copy-source", SigV4Signer.encode("/\(location.bucket)/\(source)", keepSlash: true))]
        if let ifMatch { headers.append(("x-amz-copy-source-if-match", "\"\(ifMatch)\"")) }
        let response = try await send(.PUT, key: key, headers: headers)
        // A copy can fail after its 200: the error is then the body.
        let xml = try await Self.xml(response)
        if xml.name == "Error" { throw Self.error(from: xml, status: 500) }
        return Self.tag(xml.value("ETag"))
    }

    /// One object of a listing.
    public struct ListedObject: Sendable, Hashable {
        public var key: String
        public var size: Int64
        public var lastModified: Date?
    }

    /// One page (up to 1,000 keys) of the objects whose key starts with `prefix`; pass the
    /// returned token to get the next page (nil: no more).
    public func list(prefix: String, continuation: String? = nil, maxKeys: Int = 1000) async throws -> (objects: [ListedObject], next: String?) {
        var query = [("list-type", "2"), ("prefix", prefix), ("max-keys", String(maxKeys))]
        if let continuation { query.append(("continuation-token", continuation)) }
        let xml = try await Self.xml(try await send(.GET, key: nil, query: query))
        let objects = try xml.all("Contents").map { item in
            guard let key = item.value("Key"), let size = item.value("Size").flatMap(Int64.init) else {
                throw S3Error.malformedResponse("a listed object without Key or Size")
            }
            return ListedObject(key: key, size: size, lastModified: item.value("LastModified").flatMap(Self.date))
        }
        let truncated = xml.value("IsTruncated") == "true"
        return (objects, truncated ? xml.value("NextContinuationToken") : nil)
    }

    /// Creates the bucket (tests; a development store); no error when this account owns it already.
    public func createBucket() async throws {
        var body: ByteBuffer?
        var hash = SigV4Signer.emptyPayload
        if region != "us-east-1" {
            let xml =
                "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><LocationConstraint>\(region)</LocationConstraint></CreateBucketConfiguration>"
            body = ByteBuffer(string: xml)
            hash = SHA256.hash(data: Data(xml.utf8)).hexString
        }
        do {
            _ = try await send(.PUT, key: nil, body: body, payloadSHA256: hash)
        } catch S3Error.refused(_, "BucketAlreadyOwnedByYou", _) {}
    }

    // MARK: - Multipart uploads

    /// Starts a multipart upload to `key` whose parts carry SHA-256 checksums; returns its id.
    public func createMultipartUpload(_ key: String, contentType: String = "application/octet-stream") async throws -> String {
        let xml = try await Self.xml(
            try await send(
                .POST, key: key, query: [("uploads", "")], headers: [("content-type", contentType), ("x-amz-checksum-algorithm", "SHA256")]))
        guard let id = xml.value("UploadId"), !id.isEmpty else { throw S3Error.malformedResponse("CreateMultipartUpload without an UploadId") }
        return id
    }

    /// A part uploaded: what completing the upload names.
    public struct UploadedPart: Sendable, Hashable {
        public var number: Int
        public var eTag: String
        /// Base64 SHA-256 of the part.
        public var checksum: String
    }

    /// Uploads part `number` (1–10,000) of an upload; its SHA-256 is the signed payload hash and `x-amz-checksum-sha256`.
    public func uploadPart(_ key: String, uploadId: String, number: Int, body: ByteBuffer, sha256: SHA256.Digest) async throws -> UploadedPart {
        let checksum = Data(sha256).base64EncodedString()
        let response = try await send(
            .PUT, key: key, query: [("partNumber", String(number)), ("uploadId", uploadId)], headers: [("x-amz-checksum-sha256", checksum)],
            body: body, payloadSHA256: sha256.hexString)
        guard let eTag = response.headers.first(name: "etag"), !eTag.isEmpty else { throw S3Error.malformedResponse("UploadPart without an ETag") }
        return UploadedPart(number: number, eTag: eTag, checksum: checksum)
    }

    /// Completes an upload from its parts (in order): only now does `key` exist. Returns its ETag.
    @discardableResult
    public func completeMultipartUpload(_ key: String, uploadId: String, parts: [UploadedPart]) async throws -> String? {
        var body = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        for part in parts {
            body += "<Part><PartNumber>\(part.number)</PartNumber><ETag>\(Self.escape(part.eTag))</ETag>"
            body += "<ChecksumSHA256>\(part.checksum)</ChecksumSHA256></Part>"
        }
        body += "</CompleteMultipartUpload>"
        let bytes = ByteBuffer(string: body)
        let response = try await send(
            .POST, key: key, query: [("uploadId", uploadId)], headers: [("content-type", "application/xml")], body: bytes,
            payloadSHA256: SHA256.hash(data: Data(body.utf8)).hexString)
        // Like a copy, completion can fail after its 200.
        let xml = try await Self.xml(response)
        if xml.name == "Error" { throw Self.error(from: xml, status: 500) }
        return Self.tag(xml.value("ETag"))
    }

    /// Abandons an upload and frees its parts (no error when it is already gone).
    public func abortMultipartUpload(_ key: String, uploadId: String) async throws {
        do { _ = try await send(.DELETE, key: key, query: [("uploadId", uploadId)]) } catch S3Error.notFound {}
    }

    /// A multipart upload in progress.
    public struct PendingUpload: Sendable, Hashable {
        public var key: String
        public var uploadId: String
        public var initiated: Date?
    }

    /// Multipart uploads in progress whose key starts with `prefix` (every page).
    public func multipartUploads(prefix: String) async throws -> [PendingUpload] {
        var uploads: [PendingUpload] = []
        var markers: (key: String, id: String)?
        var seen: Set<String> = []
        repeat {
            var query = [("uploads", ""), ("prefix", prefix)]
            if let markers { query += [("key-marker", markers.key), ("upload-id-marker", markers.id)] }
            let xml = try await Self.xml(try await send(.GET, key: nil, query: query))
            for item in xml.all("Upload") {
                guard let key = item.value("Key"), let id = item.value("UploadId") else { continue }
                uploads.append(PendingUpload(key: key, uploadId: id, initiated: item.value("Initiated").flatMap(Self.date)))
            }
            if xml.value("IsTruncated") == "true", let key = xml.value("NextKeyMarker"), let id = xml.value("NextUploadIdMarker") {
                // A marker handed back twice would loop forever.
                guard seen.insert(key + "\u{0}" + id).inserted, seen.count <= 100_000 else {
                    throw S3Error.malformedResponse("the uploads listing repeats itself")
                }
                markers = (key, id)
            } else {
                markers = nil
            }
        } while markers != nil
        return uploads
    }

    // MARK: - Presigned URLs

    /// A URL anyone holding it may GET `key` with for `expires` seconds (1–604,800) from
    /// `date`; `responseContentType` and `responseContentDisposition` make the store answer
    /// with those headers. Only `host` is signed: the holder may send `Range`.
    public func presignedGET(_ key: String, expires: Int, responseContentType: String?, responseContentDisposition: String?, date: Date) -> String {
        var query: [(String, String)] = [("response-cache-control", "private, no-store")]
        if let responseContentType { query.append(("response-content-type", responseContentType)) }
        if let responseContentDisposition { query.append(("response-content-disposition", responseContentDisposition)) }
        let path = endpoint.path(key: key)
        let signed = signer.presignedQuery(method: "GET", path: path, query: query, host: endpoint.host, expires: expires, date: date)
        return endpoint.url(path: path, encodedQuery: signed)
    }

    // MARK: - Sending

    /// Signs and sends one request; a non-2xx answer becomes an ``S3Error`` (404 `NoSuchKey`
    /// or `NoSuchUpload`: ``S3Error/notFound``; 5xx: ``S3Error/unavailable(_:)``; other 4xx:
    /// ``S3Error/refused(status:code:message:)``), as does a network failure or a timeout.
    func send(
        _ method: HTTPMethod, key: String?, query: [(String, String)] = [], headers: [(String, String)] = [], body: ByteBuffer? = nil,
        payloadSHA256: String = SigV4Signer.emptyPayload
    ) async throws -> HTTPClientResponse {
        let path = endpoint.path(key: key)
        let all = headers + [("host", endpoint.host)]
        let signed = signer.sign(method: method.rawValue, path: path, query: query, headers: all, payloadSHA256: payloadSHA256, date: Date())
        var request = HTTPClientRequest(url: endpoint.url(path: path, encodedQuery: SigV4Signer.canonicalQuery(query)))
        request.method = method
        for (name, value) in all + signed { request.headers.replaceOrAdd(name: name, value: value) }
        if let body { request.body = .bytes(body) }
        let response: HTTPClientResponse
        do {
            // A body is sent within the deadline too: allow it 512 KiB/s on top.
            let sending = Duration.seconds(Int64((body?.readableBytes ?? 0) / (512 * 1024)))
            response = try await http.execute(request, timeout: .init(timeouts.response + sending), logger: logger)
        } catch {
            throw S3Error.unavailable("\(method.rawValue) \(key ?? "bucket"): \(error)")
        }
        guard (200..<300).contains(response.status.code) else {
            let status = Int(response.status.code)
            let xml = method == .HEAD ? nil : try? await Self.xml(response)
            if status == 404, method == .HEAD || ["NoSuchKey", "NoSuchUpload"].contains(xml?.value("Code")) { throw S3Error.notFound }
            throw Self.error(from: xml, status: status)
        }
        return response
    }

    static func error(from xml: S3XMLNode?, status: Int) -> S3Error {
        let code = xml?.value("Code") ?? HTTPResponseStatus(statusCode: status).reasonPhrase
        let message = String((xml?.value("Message") ?? "").prefix(300))
        if status >= 500 || code == "SlowDown" || code == "InternalError" || code == "ServiceUnavailable" {
            return .unavailable("\(status) \(code) \(message)")
        }
        return .refused(status: status, code: String(code.prefix(64)), message: message)
    }

    /// The response body as XML (at most ``maxXMLBytes``).
    static func xml(_ response: HTTPClientResponse, deadline: Duration = .seconds(60)) async throws -> S3XMLNode {
        let body: ByteBuffer
        do {
            body = try await withDeadline(deadline) { try await response.body.collect(upTo: maxXMLBytes) }
        } catch {
            throw S3Error.unavailable("reading the answer: \(error)")
        }
        try Self.checkXML(body.readableBytesView)
        guard let node = S3XMLNode.parse(Data(body.readableBytesView)) else {
            throw S3Error.malformedResponse("\(response.status.code) with a body that is not XML")
        }
        return node
    }

    static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;")
            .replacingOccurrences(of: "\"", with: "&quot;")
    }

    /// An HTTP date (`Tue, 24 Nov 2026 15:00:00 GMT`).
    static func httpDate(_ text: String) -> Date? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        return formatter.date(from: text)
    }

    /// `2026-11-24T15:00:00.000Z` (with or without fractional seconds).
    static func date(_ text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: text)
    }
}

/// Runs `body`, cancelling it when it has not finished within `limit`: a store that trickles an
/// answer's body (each pause under the idle timeout) cannot hold a call forever.
func withDeadline<T: Sendable>(_ limit: Duration, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: limit)
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let value = first else { throw S3Error.unavailable("no complete answer within \(limit)") }
        return value
    }
}

extension TimeAmount {
    init(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        self = .nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }
}
