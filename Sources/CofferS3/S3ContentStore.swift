import AsyncHTTPClient
import CofferCore
import Crypto
import Foundation
import Logging
import NIOCore
import Synchronization

/// Content-addressed objects in an S3-compatible bucket: each object once, at
/// `PREFIX/objects/<sha256>`, private (the bucket grants no public reads; downloads stream
/// through Coffer or follow a presigned URL).
///
/// Uploads stream: up to one part (16 MiB by default) in memory, then a multipart upload whose
/// parts each carry their SHA-256. An upload whose digest was declared goes straight to its
/// address; one whose digest is only known at the end goes to `PREFIX/uploads/<uuid>` and is
/// copied into place inside the store. A multipart upload is completed only after the
/// whole object's SHA-256 was checked, so the address never holds other bytes, and nothing
/// is visible under it before the upload completed.
public final class S3ContentStore: ContentStore {
    public let client: S3Client
    /// Bytes per multipart part (5 MiB to 5 GiB; S3's limits), and the largest single PUT.
    public let partSize: Int
    /// Sizes already asked (objects are immutable; a deleted one is forgotten within `sizeCacheSeconds`).
    private let sizes = Mutex<[String: (size: Int64, until: ContinuousClock.Instant)]>([:])
    static let sizeCacheSeconds: Int64 = 60
    static let sizeCacheEntries = 100_000
    /// S3's largest CopyObject source, and its most parts.
    static let maxCopyBytes: Int64 = 5 * 1024 * 1024 * 1024
    static let maxParts = 10_000

    public init(client: S3Client, partSize: Int = 16 * 1024 * 1024) {
        self.client = client
        self.partSize = min(max(partSize, 5 * 1024 * 1024), 5 * 1024 * 1024 * 1024)
    }

    /// The key of the object with this digest.
    public func key(sha256: String) -> String { client.location.key("objects/" + sha256) }
    /// Where objects of unknown digest are staged.
    var uploadsPrefix: String { client.location.key("uploads/") }
    var objectsPrefix: String { client.location.key("objects/") }

    public func makeUpload(maxBytes: Int64, expectedSHA256: String?) -> any ContentUpload {
        let declared = expectedSHA256.map { $0.lowercased() }.flatMap { Self.isContentAddress($0) ? $0 : nil }
        return S3ContentUpload(store: self, maxBytes: maxBytes, declaredSHA256: declared)
    }

    public func size(sha256: String) async throws -> Int64? {
        guard Self.isContentAddress(sha256) else { return nil }
        let now = ContinuousClock.now
        if let cached = sizes.withLock({ $0[sha256] }), cached.until > now { return cached.size }
        guard let size = try await Self.translating({ try await client.head(key(sha256: sha256)) }) else { return nil }
        remember(sha256, size: size)
        return size
    }

    private func remember(_ sha256: String, size: Int64) {
        let until = ContinuousClock.now + .seconds(Self.sizeCacheSeconds)
        sizes.withLock { cache in
            if cache.count >= Self.sizeCacheEntries { cache.removeAll(keepingCapacity: true) }
            cache[sha256] = (size, until)
        }
    }

    /// Pulls the range from the store as the consumer reads (one GET; no read-ahead beyond
    /// what the HTTP client buffers), and fails when the store sends fewer or more bytes.
    public func read(sha256: String, range: ClosedRange<Int64>) -> AsyncThrowingStream<[UInt8], any Error> {
        let reader = RangeReader(store: self, sha256: sha256, range: range)
        return AsyncThrowingStream(unfolding: { try await reader.next() })
    }

    public func localFile(sha256: String) -> LocalContentFile? { nil }

    public func presignedURL(sha256: String, expires: Int, contentType: String, fileName: String, now: Date) -> String? {
        guard Self.isContentAddress(sha256) else { return nil }
        return client.presignedGET(
            key(sha256: sha256), expires: expires, responseContentType: contentType,
            responseContentDisposition: Self.attachment(fileName), date: now)
    }

    /// `attachment; filename="…"; filename*=UTF-8''…` (RFC 6266): an ASCII fallback with
    /// quotes, backslashes and controls replaced, and the exact name percent-encoded.
    static func attachment(_ name: String) -> String {
        let fallback = String(
            name.unicodeScalars.map { scalar -> Character in
                scalar.isASCII && scalar.value >= 0x20 && scalar.value != 0x7F && scalar != "\"" && scalar != "\\" ? Character(scalar) : "_"
            })
        return "attachment; filename=\"\(fallback.prefix(200))\"; filename*=UTF-8''\(SigV4Signer.encode(String(name.prefix(200)), keepSlash: false))"
    }

    /// Lists one key under the prefix: the bucket exists and the credentials may read it.
    public func checkAccess() async throws {
        _ = try await Self.translating { try await client.list(prefix: objectsPrefix, maxKeys: 1) }
    }

    public func objects() async throws -> [StoredObject] {
        var found: [StoredObject] = []
        var token: String?
        repeat {
            let page = try await Self.translating { [token] in try await client.list(prefix: objectsPrefix, continuation: token) }
            for object in page.objects {
                let name = String(object.key.dropFirst(objectsPrefix.count))
                guard object.key.hasPrefix(objectsPrefix), Self.isContentAddress(name) else { continue }
                found.append(StoredObject(sha256: name, size: object.size, modified: object.lastModified))
            }
            token = page.next
        } while token != nil
        return found
    }

    public func delete(sha256: String) async throws {
        guard Self.isContentAddress(sha256) else { return }
        try await Self.translating { try await client.delete(key(sha256: sha256)) }
        _ = sizes.withLock { $0.removeValue(forKey: sha256) }
    }

    /// Aborts multipart uploads under the prefix, and deletes staged objects, started more
    /// than `olderThan` seconds ago (an upload in progress on another instance is younger).
    /// A staged upload's age is in its key (`uploads/<unix seconds>-<uuid>`): some stores
    /// (moto) report a fixed `Initiated` date; the store's date counts for the others.
    public func removeAbandonedUploads(olderThan: TimeInterval) async throws -> Int {
        let cutoff = Date().addingTimeInterval(-olderThan)
        var removed = 0
        for upload in try await Self.translating({ try await client.multipartUploads(prefix: client.location.prefix) })
        where upload.key.hasPrefix(objectsPrefix) || upload.key.hasPrefix(uploadsPrefix) {
            guard (stagedAt(upload.key) ?? upload.initiated ?? .distantPast) <= cutoff else { continue }
            try await Self.translating { try await client.abortMultipartUpload(upload.key, uploadId: upload.uploadId) }
            removed += 1
        }
        var token: String?
        repeat {
            let page = try await Self.translating { [token] in try await client.list(prefix: uploadsPrefix, continuation: token) }
            for object in page.objects where (stagedAt(object.key) ?? object.lastModified ?? .distantPast) <= cutoff {
                try await Self.translating { try await client.delete(object.key) }
                removed += 1
            }
            token = page.next
        } while token != nil
        return removed
    }

    /// When the staged upload `key` started (nil for any other key).
    func stagedAt(_ key: String) -> Date? {
        guard key.hasPrefix(uploadsPrefix) else { return nil }
        let name = key.dropFirst(uploadsPrefix.count)
        return name.split(separator: "-", maxSplits: 1).first.flatMap { Int64($0) }.map { Date(timeIntervalSince1970: TimeInterval($0)) }
    }

    /// Runs `body`, turning an ``S3Error`` into the ``ContentStoreError`` the server answers with.
    static func translating<T>(isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as S3Error {
            switch error {
            case .unavailable: throw ContentStoreError.unavailable(error.description)
            case .refused, .malformedResponse: throw ContentStoreError.failed(error.description)
            case .notFound: throw ContentStoreError.failed("object missing: \(error.description)")
            }
        }
    }

    /// The state of one ``read(sha256:range:)``: the response body's iterator and the bytes
    /// still due. `AsyncThrowingStream(unfolding:)` calls ``next()`` from one consumer at a time.
    private actor RangeReader {
        let store: S3ContentStore
        let sha256: String
        let range: ClosedRange<Int64>
        var remaining: Int64
        var iterator: HTTPClientResponse.Body.AsyncIterator?
        var started = false

        init(store: S3ContentStore, sha256: String, range: ClosedRange<Int64>) {
            self.store = store
            self.sha256 = sha256
            self.range = range
            remaining = range.upperBound - range.lowerBound + 1
        }

        func next() async throws -> [UInt8]? {
            if !started {
                started = true
                guard S3ContentStore.isContentAddress(sha256) else { throw ContentStoreError.io("no object \(sha256.prefix(64))") }
                let body = try await S3ContentStore.translating { try await store.client.get(store.key(sha256: sha256), range: range) }
                iterator = body.makeAsyncIterator()
            }
            guard remaining > 0 else { return nil }
            var buffer: ByteBuffer
            repeat {
                guard var current = iterator else { return nil }
                let next: ByteBuffer?
                do {
                    next = try await current.next(isolation: self)
                    iterator = current
                } catch {
                    throw ContentStoreError.unavailable("reading \(sha256.prefix(16))… from the store: \(error)")
                }
                guard let next else { throw ContentStoreError.failed("the store ended \(sha256.prefix(16))… \(remaining) bytes early") }
                buffer = next
            } while buffer.readableBytes == 0
            guard Int64(buffer.readableBytes) <= remaining else {
                throw ContentStoreError.failed("the store sent more of \(sha256.prefix(16))… than asked")
            }
            remaining -= Int64(buffer.readableBytes)
            return Array(buffer.readableBytesView)
        }
    }
}
