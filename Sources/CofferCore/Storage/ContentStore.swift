import Crypto
import Foundation

/// Where asset bytes live: content-addressed objects, each stored once under the lower-case hex
/// SHA-256 of its bytes. Implementations: a local directory (CofferStore's
/// `LocalContentStore`), an S3-compatible bucket (CofferS3's `S3ContentStore`), an in-memory
/// double (CofferTestSupport).
public protocol ContentStore: Sendable {
    /// Starts a new object of at most `maxBytes` bytes, written as it arrives (never whole in
    /// memory). `expectedSHA256`, when the uploader declared it (`Content-Digest`), lets a store
    /// write straight to the object's address; ``ContentUpload/finish(expectedSHA256:)`` still checks it.
    func makeUpload(maxBytes: Int64, expectedSHA256: String?) async throws -> any ContentUpload
    /// The size of the object with this digest; nil when there is none (or `sha256` is not
    /// 64 lower-case hex characters).
    func size(sha256: String) async throws -> Int64?
    /// Streams the bytes `range` of the object (both ends inclusive, inside its size), in chunks.
    func read(sha256: String, range: ClosedRange<Int64>) -> AsyncThrowingStream<[UInt8], any Error>
    /// ``read(sha256:range:)``, started: a remote store sends its request and checks the
    /// answer's head here, so that a missing object (nil) or a failing store (thrown) is known
    /// before the server sends its own head. Local stores return ``read(sha256:range:)``.
    func open(sha256: String, range: ClosedRange<Int64>) async throws -> AsyncThrowingStream<[UInt8], any Error>?
    /// The object as a file on this machine, when the store keeps it as one: the server then
    /// streams the file itself, or hands it to nginx (X-Accel-Redirect). Nil for a malformed
    /// address and for stores that keep no files. It does not tell whether the object exists:
    /// ``size(sha256:)`` does, and the server asks it first.
    func localFile(sha256: String) -> LocalContentFile?
    /// A URL from which anyone holding it may GET the object (with `Range`) for `expires`
    /// seconds from `now`, answered with `contentType` and as an attachment named `fileName`;
    /// nil for stores that cannot hand out such URLs (the local directory).
    func presignedURL(sha256: String, expires: Int, contentType: String, fileName: String, now: Date) -> String?
    /// Every object in the store (for `coffer content gc` and `content migrate`).
    func objects() async throws -> [StoredObject]
    /// Deletes the object (no error when it does not exist).
    func delete(sha256: String) async throws
    /// Deletes the object unless it was written after `cutoff`, asked just before deleting (an
    /// upload of the same bytes rewrites or touches it); returns whether it was deleted.
    func delete(sha256: String, ifNotModifiedAfter cutoff: Date) async throws -> Bool
    /// Removes what interrupted uploads left (temporary files, unfinished multipart uploads)
    /// older than `olderThan` seconds; returns how many.
    func removeAbandonedUploads(olderThan: TimeInterval) async throws -> Int
    /// The store's tag (an S3 ETag) of the version of the object whose bytes were checked
    /// against its address, for a proxy that fetches it (nginx sends it as `If-Match`); nil
    /// when the store keeps no such record, or has none for this object yet. Throws when the
    /// record cannot be read (the proxy must not fetch unpinned then).
    func pinnedTag(sha256: String) async throws -> String?
}

/// The version of each object of a remote store whose bytes were checked against their
/// address (``ContentStoreError/changed``): SQLite, PostgreSQL, in memory (tests). Appended
/// only (the newest pin of an object counts), so the application role needs no more than
/// it has on every table. Not part of the ledger: a pin lost is re-learnt when the object is
/// next read whole by a reader that checks it.
public protocol ContentPinRepository: Sendable {
    /// The tag recorded for `sha256` in the store named `location`; nil when none is.
    func pinnedTag(location: String, sha256: String) async throws -> String?
    /// Records `tag` for `sha256` in the store named `location` (appended: the newest counts).
    func pin(location: String, sha256: String, tag: String, at: Date) async throws
}

/// One recorded pin (``ContentPinRepository``), as `coffer ledger copy` moves it.
public struct ContentPin: Sendable, Hashable {
    public var location: String
    public var sha256: String
    public var tag: String
    public var pinnedAt: Date

    public init(location: String, sha256: String, tag: String, pinnedAt: Date) {
        self.location = location
        self.sha256 = sha256
        self.tag = tag
        self.pinnedAt = pinnedAt
    }
}

/// One object of a store.
public struct StoredObject: Sendable, Hashable {
    public var sha256: String
    public var size: Int64
    /// When it was written; nil when the store does not say.
    public var modified: Date?

    public init(sha256: String, size: Int64, modified: Date?) {
        self.sha256 = sha256
        self.size = size
        self.modified = modified
    }
}

/// An object that is a file on this machine.
public struct LocalContentFile: Sendable, Hashable {
    /// Absolute (or data-directory relative) path of the file.
    public var path: String
    /// The path under the store's root (`objects/ab/cdef…`), for a web server that serves the
    /// store's directory itself.
    public var relativePath: String

    public init(path: String, relativePath: String) {
        self.path = path
        self.relativePath = relativePath
    }
}

/// One object being written: bytes are hashed as they arrive; ``finish(expectedSHA256:)``
/// makes the object durable and visible under its digest, ``abort()`` discards it. Used from
/// one task at a time.
public protocol ContentUpload: AnyObject {
    /// Appends bytes. Throws ``ContentStoreError/tooLarge`` (and discards the object) when the
    /// total would exceed the upload's `maxBytes`.
    func append(_ bytes: some Collection<UInt8>) async throws
    /// Completes the object and returns its lower-case hex SHA-256 and size. Throws
    /// ``ContentStoreError/digestMismatch`` (and discards the object) when `expectedSHA256`
    /// is given and differs (compared case-insensitively).
    func finish(expectedSHA256: String?) async throws -> (sha256: String, size: Int64)
    /// Discards the object (and what a store kept of it so far). Safe to call more than once,
    /// and after a failure; never throws (a store it cannot reach keeps leftovers that
    /// ``ContentStore/removeAbandonedUploads(olderThan:)`` removes later).
    func abort() async
}

/// Errors from a ``ContentStore`` and its uploads.
public enum ContentStoreError: Error, Sendable, Hashable {
    /// More than `maxBytes` were written.
    case tooLarge
    /// The bytes do not hash to the expected SHA-256.
    case digestMismatch
    /// A storage operation failed.
    case io(String)
    /// The store cannot be reached or timed out: retry later (503 `contentStoreUnavailable`).
    case unavailable(String)
    /// The store refused or answered wrongly (credentials, permissions, a missing bucket):
    /// its operator must look (502 `contentStoreError`).
    case failed(String)
    /// The object is no longer the version whose bytes were checked against its address: it
    /// was changed in the store since (502 `contentStoreError`; the server quarantines it).
    case changed(String)
}

/// What reading an object whole found (``ContentStore/checkWhole(sha256:)``).
public enum WholeCheck: Sendable, Hashable {
    /// No such object.
    case missing
    /// Its bytes (`read` of them) do not hash to its address.
    case changed(read: Int64)
    /// Its bytes hash to its address.
    case intact(size: Int64)
}

extension ContentStore {
    public func pinnedTag(sha256: String) async throws -> String? { nil }

    /// Reads the object whole with ``read(sha256:range:)`` (a store that keeps pins pins a
    /// version that hashes right) and checks it against its address; a failing store throws.
    public func checkWhole(sha256: String) async throws -> WholeCheck {
        guard let size = try await size(sha256: sha256) else { return .missing }
        var hasher = SHA256()
        var read: Int64 = 0
        if size > 0 {
            for try await chunk in self.read(sha256: sha256, range: 0...(size - 1)) {
                hasher.update(data: chunk)
                read += Int64(chunk.count)
            }
        }
        return read == size && hasher.finalize().hexString == sha256 ? .intact(size: size) : .changed(read: read)
    }

    public func open(sha256: String, range: ClosedRange<Int64>) async throws -> AsyncThrowingStream<[UInt8], any Error>? {
        guard try await size(sha256: sha256) != nil else { return nil }
        return read(sha256: sha256, range: range)
    }

    /// Writes every chunk of `chunks` as one object and returns its digest and size; on any
    /// error (too large, digest mismatch, `chunks` throwing) nothing is left behind.
    public func write<S: AsyncSequence>(_ chunks: S, maxBytes: Int64, expectedSHA256: String?) async throws -> (sha256: String, size: Int64)
    where S.Element: Collection<UInt8> {
        let upload = try await makeUpload(maxBytes: maxBytes, expectedSHA256: expectedSHA256)
        do {
            for try await chunk in chunks { try await upload.append(chunk) }
            return try await upload.finish(expectedSHA256: expectedSHA256)
        } catch {
            await upload.abort()
            throw error
        }
    }

    /// Whether `digest` is exactly 64 lower-case hex characters (a content address).
    public static func isContentAddress(_ digest: String) -> Bool {
        Hex.isEncoded(digest, byteCount: 32)
    }
}
