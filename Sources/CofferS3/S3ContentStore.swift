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
///
/// Pins (``attach(pins:)``): whoever can write the bucket can still put other bytes at an
/// address, and a range cannot be checked against it. So the store records, per object, the
/// ETag of the version whose bytes were checked — the one an upload completed, or one a whole
/// read found hashing to its address — and a client's read (``open(sha256:range:)``, whole or
/// not) asks for that version only (`If-Match`): a changed object answers 412, and the read
/// fails with ``ContentStoreError/changed(_:)`` before any byte. A reader that checks what it
/// reads (``read(sha256:range:)``: the quarantine's re-read, `coffer content verify`) goes
/// without `If-Match`, so it can find the object put right again, and the store pins the
/// version it then hashed.
public final class S3ContentStore: ContentStore {
    public let client: S3Client
    /// Bytes per multipart part (5 MiB, S3's smallest, to ``maxPartSize``), and the largest single PUT.
    public let partSize: Int
    /// Sizes (and the ETags their `HEAD` gave) already asked (objects are immutable; a deleted
    /// one is forgotten within `sizeCacheSeconds`).
    private let sizes = Mutex<[String: (size: Int64, eTag: String?, until: ContinuousClock.Instant)]>([:])
    static let sizeCacheSeconds: Int64 = 60
    static let sizeCacheEntries = 100_000
    /// S3's largest CopyObject source, and its most parts.
    static let maxCopyBytes: Int64 = 5 * 1024 * 1024 * 1024
    static let maxParts = 10_000

    /// The largest part: one is held in memory per upload (S3 allows 5 GiB).
    public static let maxPartSize = 512 * 1024 * 1024

    /// `pinCache`: how long an answer of the pin repository is used before it is asked again.
    public init(client: S3Client, partSize: Int = 16 * 1024 * 1024, pinCache: Duration = .seconds(60)) {
        self.client = client
        self.partSize = min(max(partSize, 5 * 1024 * 1024), Self.maxPartSize)
        self.pinCache = pinCache
        pinLocation = "\(client.endpoint.host) \(client.location)"
    }

    // MARK: - Pins

    /// The store a pin names: the endpoint's host, the bucket and the prefix.
    public let pinLocation: String
    private let pinRepository = Mutex<(any ContentPinRepository)?>(nil)
    /// The repository's answers as last read or written here, each kept ``pinCache``:
    /// another instance pins a new version only after checking its bytes, and a client read
    /// refused with this instance's stale copy asks again (accel mode's reads, which Coffer
    /// does not see refused, follow within that time).
    private let tags = Mutex<[String: (tag: String?, until: ContinuousClock.Instant)]>([:])
    let pinCache: Duration

    /// Records checked versions in `pins` from now on (the server's database). Without it, a
    /// range is read from whatever the store holds.
    public func attach(pins: any ContentPinRepository) { pinRepository.withLock { $0 = pins } }

    /// The tag pinned for `sha256` (nil: none, or no repository). `fresh`: ask the repository,
    /// not this instance's copy. A repository that cannot answer leaves this instance's last
    /// copy of a pin in force, however old (it can only refuse bytes, never let other ones
    /// through); with none, it is ``ContentStoreError/unavailable(_:)``: a read that may have
    /// been pinned is never sent unpinned.
    func tag(_ sha256: String, fresh: Bool = false) async throws -> String? {
        guard let repository = pinRepository.withLock({ $0 }) else { return nil }
        let known = tags.withLock { $0[sha256] }
        if !fresh, let known, known.until > .now { return known.tag }
        let tag: String?
        do {
            tag = try await repository.pinnedTag(location: pinLocation, sha256: sha256)
        } catch {
            if let pinned = known?.tag { return pinned }
            throw ContentStoreError.unavailable("the content pins cannot be read: \(error)")
        }
        remember(sha256, tag: tag)
        return tag
    }

    private func remember(_ sha256: String, tag: String?) {
        let until = ContinuousClock.now + pinCache
        tags.withLock { cache in
            if cache.count >= Self.sizeCacheEntries { cache.removeAll(keepingCapacity: true) }
            cache[sha256] = (tag, until)
        }
    }

    /// Pins `tag`, the version a whole read hashed to the address, unless this instance knows
    /// it is pinned already, or the store holds another version by now (a read that ended after
    /// an upload replaced the object must not pin the version before it). Failing to record
    /// it only loses the check until the next.
    func pin(_ sha256: String, tag: String) async {
        guard pinRepository.withLock({ $0 }) != nil else { return }
        if let known = tags.withLock({ $0[sha256] }), known.until > .now, known.tag == tag { return }
        do {
            guard try await client.head(key(sha256: sha256))?.eTag == tag else { return }
            try await pinUploaded(sha256, tag: tag)
        } catch {
            client.logger.warning("content pin not recorded", metadata: ["sha256": "\(sha256)", "error": "\(error)"])
        }
    }

    /// Pins `tag`, the version an upload just wrote (``ContentStoreError/unavailable(_:)``
    /// when it cannot be recorded: the upload fails rather than leave an older pin in force).
    func pinUploaded(_ sha256: String, tag: String) async throws {
        guard let repository = pinRepository.withLock({ $0 }) else { return }
        do {
            try await repository.pin(location: pinLocation, sha256: sha256, tag: tag, at: Date())
        } catch {
            throw ContentStoreError.unavailable("the content pin cannot be recorded: \(error)")
        }
        remember(sha256, tag: tag)
        // The version a `HEAD` saw before may be the one just replaced (``pinnedTag(sha256:)``).
        forget(sha256)
    }

    /// Whether this store records pins (``attach(pins:)``).
    public var pins: Bool { pinRepository.withLock { $0 != nil } }

    /// The pin, for a proxy that fetches the object itself (nginx, accel mode) and whose 412
    /// Coffer never sees: ``ContentStoreError/changed(_:)`` when the `HEAD` that gives the
    /// object's size (``size(sha256:)``, at most a minute old) named another version — the
    /// server quarantines it then, and the quarantine's re-read pins the version there if its
    /// bytes are right (bytes copied under a new ETag heal by themselves, in accel mode too).
    public func pinnedTag(sha256: String) async throws -> String? {
        guard Self.isContentAddress(sha256) else { return nil }
        guard let pinned = try await tag(sha256) else { return nil }
        if let seen = try await head(sha256)?.eTag, seen != pinned {
            throw ContentStoreError.changed("\(sha256.prefix(16))… is not the version whose bytes were checked (changed in the store)")
        }
        return pinned
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
        try await head(sha256)?.size
    }

    /// The object's size and ETag, from a `HEAD` at most ``sizeCacheSeconds`` old; nil when none.
    private func head(_ sha256: String) async throws -> (size: Int64, eTag: String?)? {
        guard Self.isContentAddress(sha256) else { return nil }
        if let cached = sizes.withLock({ $0[sha256] }), cached.until > .now { return (cached.size, cached.eTag) }
        guard let head = try await Self.translating({ try await client.head(key(sha256: sha256)) }) else { return nil }
        remember(sha256, size: head.size, eTag: head.eTag)
        return (head.size, head.eTag)
    }

    private func forget(_ sha256: String) { _ = sizes.withLock { $0.removeValue(forKey: sha256) } }

    private func remember(_ sha256: String, size: Int64, eTag: String?) {
        let until = ContinuousClock.now + .seconds(Self.sizeCacheSeconds)
        sizes.withLock { cache in
            if cache.count >= Self.sizeCacheEntries { cache.removeAll(keepingCapacity: true) }
            cache[sha256] = (size, eTag, until)
        }
    }

    /// Streamed reads from the store at once, at most: each holds one connection of the
    /// client's pool (``S3Client/connectionLimit``) for its whole length, and the pool keeps
    /// room beyond them for uploads, sizes and listings. Beyond it: 503
    /// `contentStoreUnavailable` at once (redirect mode has no such cost).
    public static let maxConcurrentReads = 256
    private let readers = Atomic<Int>(0)

    /// Sends the GET and checks its answer's head before returning (a missing object is nil, a
    /// failing store an error: the server answers 404/502/503 before its own head), then pulls
    /// the body as the consumer reads it, failing when the store sends fewer or more bytes.
    /// For a client: a pinned object is asked for in its pinned version only, whole or not
    /// (another is ``ContentStoreError/changed(_:)``, before any byte), and an object not
    /// pinned yet is pinned when it was read whole and hashed to its address.
    public func open(sha256: String, range: ClosedRange<Int64>) async throws -> AsyncThrowingStream<[UInt8], any Error>? {
        guard Self.isContentAddress(sha256) else { return nil }
        let pinned = try await tag(sha256)
        return try await open(sha256: sha256, range: range, ifMatch: pinned, pinning: pinned == nil ? .later : .never)
    }

    /// Whether a read pins the version it got once its bytes hash to the address.
    enum Pinning {
        case never
        /// In the background (a client's download does not wait for the database).
        case later
        /// Before the stream ends (a check that reports the object right).
        case awaited
    }

    func open(sha256: String, range: ClosedRange<Int64>, ifMatch: String?, pinning: Pinning) async throws -> AsyncThrowingStream<
        [UInt8], any Error
    >? {
        guard readers.add(1, ordering: .relaxed).newValue <= Self.maxConcurrentReads else {
            readers.subtract(1, ordering: .relaxed)
            throw ContentStoreError.unavailable("\(Self.maxConcurrentReads) downloads from the store are in progress")
        }
        let length = range.upperBound - range.lowerBound + 1
        let got: S3Client.Got
        do {
            got = try await get(sha256, range: range, ifMatch: ifMatch)
        } catch S3Error.notFound {
            readers.subtract(1, ordering: .relaxed)
            forget(sha256)
            return nil
        } catch {
            readers.subtract(1, ordering: .relaxed)
            return try await Self.translating { throw error }
        }
        // Only the whole object (the store says how long it is) can hash to its address.
        let whole = range.lowerBound == 0 && got.size == length
        let check = pinning != .never && whole ? got.eTag : nil
        let reader = RangeReader(sha256: sha256, body: got.body, length: length, timeouts: client.timeouts, check: check) { [self] in
            readers.subtract(1, ordering: .relaxed)
        } checked: { [self] tag in
            if pinning == .awaited {
                await pin(sha256, tag: tag)
            } else {
                Task { await pin(sha256, tag: tag) }
            }
        }
        return AsyncThrowingStream(unfolding: { try await reader.next() })
    }

    /// GET with `ifMatch`; a 412 asks the repository once more (another instance may have
    /// pinned a version restored since) and tries its tag, else is ``ContentStoreError/changed(_:)``.
    private func get(_ sha256: String, range: ClosedRange<Int64>, ifMatch: String?) async throws -> S3Client.Got {
        do {
            return try await client.get(key(sha256: sha256), range: range, ifMatch: ifMatch)
        } catch S3Error.refused(412, _, _) where ifMatch != nil {
            if let fresh = try await tag(sha256, fresh: true), fresh != ifMatch {
                do {
                    return try await client.get(key(sha256: sha256), range: range, ifMatch: fresh)
                } catch S3Error.refused(412, _, _) {}
            }
            throw ContentStoreError.changed("\(sha256.prefix(16))… is not the version whose bytes were checked (changed in the store)")
        }
    }

    /// For a reader that checks what it reads (the quarantine's re-read, `coffer content
    /// migrate` and `verify`): whatever version the store holds, the stream failing as
    /// ``open(sha256:range:)``'s does; a whole read that hashes to its address is pinned
    /// before the stream ends — how an object put right again is served again.
    public func read(sha256: String, range: ClosedRange<Int64>) -> AsyncThrowingStream<[UInt8], any Error> {
        let opener = Opener(store: self, sha256: sha256, range: range)
        return AsyncThrowingStream(unfolding: { try await opener.next() })
    }

    private actor Opener {
        let store: S3ContentStore
        let sha256: String
        let range: ClosedRange<Int64>
        var stream: AsyncThrowingStream<[UInt8], any Error>.AsyncIterator?

        init(store: S3ContentStore, sha256: String, range: ClosedRange<Int64>) {
            self.store = store
            self.sha256 = sha256
            self.range = range
        }

        func next() async throws -> [UInt8]? {
            if stream == nil {
                guard S3ContentStore.isContentAddress(sha256),
                    let opened = try await store.open(sha256: sha256, range: range, ifMatch: nil, pinning: .awaited)
                else {
                    throw ContentStoreError.io("no object \(sha256.prefix(64))")
                }
                stream = opened.makeAsyncIterator()
            }
            guard var current = stream else { return nil }
            let chunk = try await current.next(isolation: self)
            stream = current
            return chunk
        }
    }

    public func localFile(sha256: String) -> LocalContentFile? { nil }

    /// A presigned URL is a function of the object, the lifetime, the type and name, and the
    /// second it is signed in: every download of one asset within a second gets the same URL,
    /// so the URLs of the current second are kept (at most ``presignedPerSecond``) instead of
    /// signed again — signing was most of a redirect's cost.
    public func presignedURL(sha256: String, expires: Int, contentType: String, fileName: String, now: Date) -> String? {
        guard Self.isContentAddress(sha256) else { return nil }
        let second = Int64(now.timeIntervalSince1970.rounded(.down))
        let key = PresignedKey(sha256: sha256, expires: expires, contentType: contentType, fileName: fileName)
        if let url = presigned.withLock({ $0.second == second ? $0.urls[key] : nil }) { return url }
        let url = client.presignedGET(
            self.key(sha256: sha256), expires: expires, responseContentType: contentType,
            responseContentDisposition: ContentDisposition.attachment(fileName), date: Date(timeIntervalSince1970: Double(second)))
        presigned.withLock { cache in
            if cache.second != second { cache = (second, [:]) }
            if cache.urls.count < Self.presignedPerSecond { cache.urls[key] = url }
        }
        return url
    }

    private struct PresignedKey: Hashable {
        var sha256: String
        var expires: Int
        var contentType: String
        var fileName: String
    }

    static let presignedPerSecond = 4096
    private let presigned = Mutex<(second: Int64, urls: [PresignedKey: String])>((0, [:]))

    /// Lists one key under the prefix: the bucket exists and the credentials may read it.
    public func checkAccess() async throws {
        _ = try await Self.translating { try await client.list(prefix: objectsPrefix, maxKeys: 1) }
    }

    public func objects() async throws -> [StoredObject] {
        var found: [StoredObject] = []
        var token: String?
        var seen: Set<String> = []
        repeat {
            let page = try await Self.translating { [token] in try await client.list(prefix: objectsPrefix, continuation: token) }
            try Self.checkNext(page.next, seen: &seen)
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
        forget(sha256)
    }

    /// Deletes the object unless it was written after `cutoff` (asked just before: an upload of
    /// the same bytes rewrites it); returns whether it was deleted.
    public func delete(sha256: String, ifNotModifiedAfter cutoff: Date) async throws -> Bool {
        guard Self.isContentAddress(sha256) else { return false }
        guard let head = try await Self.translating({ try await client.head(key(sha256: sha256)) }) else { return false }
        guard let modified = head.lastModified, modified <= cutoff else { return false }
        try await delete(sha256: sha256)
        return true
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
            // An age the store does not tell is young: never abort an upload that may be running.
            guard (stagedAt(upload.key) ?? upload.initiated ?? .distantFuture) <= cutoff else { continue }
            try await Self.translating { try await client.abortMultipartUpload(upload.key, uploadId: upload.uploadId) }
            removed += 1
        }
        var token: String?
        var seen: Set<String> = []
        repeat {
            let page = try await Self.translating { [token] in try await client.list(prefix: uploadsPrefix, continuation: token) }
            try Self.checkNext(page.next, seen: &seen)
            for object in page.objects where (stagedAt(object.key) ?? object.lastModified ?? .distantFuture) <= cutoff {
                try await Self.translating { try await client.delete(object.key) }
                removed += 1
            }
            token = page.next
        } while token != nil
        return removed
    }

    /// A listing that hands back a token it gave before would loop forever.
    static func checkNext(_ next: String?, seen: inout Set<String>) throws {
        guard let next else { return }
        guard seen.insert(next).inserted, seen.count <= 1_000_000 else {
            throw ContentStoreError.failed("the store's listing repeats itself (continuation \(next.prefix(40)))")
        }
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

    /// The state of one opened read: the response body's iterator and the bytes still due.
    /// `AsyncThrowingStream(unfolding:)` calls ``next()`` from one consumer at a time; the
    /// reader's slot is given back when the stream is dropped (finished, failed or cancelled).
    private actor RangeReader {
        let sha256: String
        var remaining: Int64
        var iterator: HTTPClientResponse.Body.AsyncIterator?
        let release: @Sendable () -> Void
        let timeouts: S3Timeouts
        /// Time spent waiting for the store (not for the consumer), and the bytes it sent.
        var waited = Duration.zero
        var received: Int64 = 0
        /// A whole object's version to pin once its bytes hash to its address.
        let check: String?
        var hasher: SHA256?
        let checked: @Sendable (String) async -> Void

        init(
            sha256: String, body: HTTPClientResponse.Body, length: Int64, timeouts: S3Timeouts, check: String?,
            release: @escaping @Sendable () -> Void, checked: @escaping @Sendable (String) async -> Void
        ) {
            self.sha256 = sha256
            remaining = length
            iterator = body.makeAsyncIterator()
            self.timeouts = timeouts
            self.release = release
            self.check = check
            hasher = check == nil ? nil : SHA256()
            self.checked = checked
        }

        deinit { release() }

        func next() async throws -> [UInt8]? {
            guard remaining > 0 else { return nil }
            var buffer: ByteBuffer
            repeat {
                guard var current = iterator else { return nil }
                let next: ByteBuffer?
                let started = ContinuousClock.now
                do {
                    next = try await current.next(isolation: self)
                    iterator = current
                } catch {
                    throw ContentStoreError.unavailable("reading \(sha256.prefix(16))… from the store: \(error)")
                }
                waited += ContinuousClock.now - started
                guard let next else { throw ContentStoreError.failed("the store ended \(sha256.prefix(16))… \(remaining) bytes early") }
                buffer = next
                received += Int64(next.readableBytes)
                if waited > timeouts.response + .seconds(received / timeouts.minimumRate) {
                    iterator = nil  // drops the response: its connection is closed
                    throw ContentStoreError.unavailable(
                        "the store sends \(sha256.prefix(16))… slower than \(timeouts.minimumRate) bytes/s (\(received) bytes in \(waited))")
                }
            } while buffer.readableBytes == 0
            guard Int64(buffer.readableBytes) <= remaining else {
                throw ContentStoreError.failed("the store sent more of \(sha256.prefix(16))… than asked")
            }
            remaining -= Int64(buffer.readableBytes)
            let bytes = Array(buffer.readableBytesView)
            if hasher != nil {
                hasher?.update(data: bytes)
                if remaining == 0, let check, let digest = hasher?.finalize(), digest.hexString == sha256 { await checked(check) }
            }
            return bytes
        }
    }
}
