import CofferCore
import Foundation
import Synchronization

/// Content-addressed objects in memory: the double of the local directory store for tests
/// of the paths that do not read files (``localFile(sha256:)`` is always nil, so the server
/// streams through ``read(sha256:range:)``, in chunks of `chunkSize` bytes).
///
///     let content = InMemoryContentStore(chunkSize: 3)
///     let stored = try await content.write(chunks, maxBytes: 1024, expectedSHA256: nil)
public final class InMemoryContentStore: ContentStore {
    private let stored = Mutex<[String: [UInt8]]>([:])
    /// The largest chunk ``read(sha256:range:)`` yields.
    public let chunkSize: Int

    public init(chunkSize: Int = 64 * 1024) { self.chunkSize = max(1, chunkSize) }

    public func makeUpload(maxBytes: Int64, expectedSHA256: String?) -> any ContentUpload {
        InMemoryContentUpload(maxBytes: maxBytes, store: self)
    }

    /// Keeps an object (a finished upload); the same bytes twice are one object.
    func install(_ bytes: [UInt8], sha256: String) { stored.withLock { $0[sha256] = $0[sha256] ?? bytes } }

    public func size(sha256: String) -> Int64? {
        guard Self.isContentAddress(sha256) else { return nil }
        return stored.withLock { $0[sha256].map { Int64($0.count) } }
    }

    public func read(sha256: String, range: ClosedRange<Int64>) -> AsyncThrowingStream<[UInt8], any Error> {
        let bytes = Self.isContentAddress(sha256) ? stored.withLock { $0[sha256] } : nil
        let chunkSize = Int64(chunkSize)
        return AsyncThrowingStream { continuation in
            guard let bytes else { return continuation.finish(throwing: ContentStoreError.io("no object \(sha256.prefix(64))")) }
            guard range.lowerBound >= 0, range.upperBound < Int64(bytes.count) else {
                return continuation.finish(throwing: ContentStoreError.io("range \(range) is outside the object's \(bytes.count) bytes"))
            }
            var start = range.lowerBound
            while start <= range.upperBound {
                let end = min(range.upperBound, start + chunkSize - 1)
                continuation.yield(Array(bytes[Int(start)...Int(end)]))
                start = end + 1
            }
            continuation.finish()
        }
    }

    public func localFile(sha256: String) -> LocalContentFile? { nil }

    public func presignedURL(sha256: String, expires: Int, contentType: String, fileName: String, now: Date) -> String? { nil }

    public func objects() -> [StoredObject] {
        stored.withLock { $0.map { StoredObject(sha256: $0.key, size: Int64($0.value.count), modified: nil) }.sorted { $0.sha256 < $1.sha256 } }
    }

    public func delete(sha256: String) { _ = stored.withLock { $0.removeValue(forKey: sha256) } }

    public func removeAbandonedUploads(olderThan: TimeInterval) -> Int { 0 }

    /// Keeps no dates: deletes.
    public func delete(sha256: String, ifNotModifiedAfter cutoff: Date) -> Bool {
        stored.withLock { $0.removeValue(forKey: sha256) } != nil
    }

    /// How many objects are stored (tests check that refused uploads leave nothing).
    public var count: Int { stored.withLock { $0.count } }
}
