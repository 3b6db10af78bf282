import Foundation

/// Where asset bytes live: content-addressed objects, each stored once under the lower-case hex
/// SHA-256 of its bytes. Implementations: a local directory (CofferStore's
/// `LocalContentStore`), an in-memory double (CofferTestSupport).
public protocol ContentStore: Sendable {
    /// Starts a new object of at most `maxBytes` bytes, written as it arrives (never whole in memory).
    func makeUpload(maxBytes: Int64) async throws -> any ContentUpload
    /// The size of the object with this digest; nil when there is none (or `sha256` is not
    /// 64 lower-case hex characters).
    func size(sha256: String) async throws -> Int64?
    /// Streams the bytes `range` of the object (both ends inclusive, inside its size), in chunks.
    func read(sha256: String, range: ClosedRange<Int64>) -> AsyncThrowingStream<[UInt8], any Error>
    /// The object as a file on this machine, when the store keeps it as one: the server then
    /// streams the file itself, or hands it to nginx (X-Accel-Redirect). Nil for a malformed
    /// address and for stores that keep no files. It does not tell whether the object exists:
    /// ``size(sha256:)`` does, and the server asks it first.
    func localFile(sha256: String) -> LocalContentFile?
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
    /// Discards the object. Safe to call more than once, and after a failure.
    func abort()
}

/// Errors from a ``ContentStore`` and its uploads.
public enum ContentStoreError: Error, Sendable, Hashable {
    /// More than `maxBytes` were written.
    case tooLarge
    /// The bytes do not hash to the expected SHA-256.
    case digestMismatch
    /// A storage operation failed.
    case io(String)
}

extension ContentStore {
    /// Writes every chunk of `chunks` as one object and returns its digest and size; on any
    /// error (too large, digest mismatch, `chunks` throwing) nothing is left behind.
    public func write<S: AsyncSequence>(_ chunks: S, maxBytes: Int64, expectedSHA256: String?) async throws -> (sha256: String, size: Int64)
    where S.Element: Collection<UInt8> {
        let upload = try await makeUpload(maxBytes: maxBytes)
        do {
            for try await chunk in chunks { try await upload.append(chunk) }
            return try await upload.finish(expectedSHA256: expectedSHA256)
        } catch {
            upload.abort()
            throw error
        }
    }

    /// Whether `digest` is exactly 64 lower-case hex characters (a content address).
    public static func isContentAddress(_ digest: String) -> Bool {
        Hex.isEncoded(digest, byteCount: 32)
    }
}
