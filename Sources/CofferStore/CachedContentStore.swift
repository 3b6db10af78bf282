import CofferCore
import Foundation
import Logging
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A read-through cache, on this machine's disk, of a remote store's objects (`DATA/cache`,
/// laid out like ``LocalContentStore``): the server streams a cached object as a local file
/// — no request to the bucket, no copy through memory — and the bucket answers only for
/// objects not yet here.
///
/// Objects are addressed by their SHA-256, so a copy never goes stale. A streamed download
/// from the start of an object that is not here starts one background fill of the whole
/// object, which is written to `tmp`, hashed, checked against its address and size, fsynced
/// and renamed into place — bytes that do not hash to their address are never kept. At most
/// ``maxFills`` fills run at once (a miss while they are busy streams from the bucket and
/// fills later), one per object, and one object is fetched for the cache at most once per
/// ``refillInterval`` (success or failure): a client cycling through more than the budget
/// cannot make the instance fetch the same objects over and over. An object larger than a
/// quarter of the budget is never kept, nor one that would take the cache beyond 1.5 × its
/// budget.
///
/// The budget is kept by evicting the least recently used objects after each fill. An
/// object used in the last ``recentUse`` is never evicted (the download that was just told
/// its path may not have opened it yet), so the directory can overshoot its budget by what
/// was served within that window — up to the 1.5 × ceiling. Use refreshes the file's
/// modification time (at most every ``touchInterval``), and eviction checks it just before
/// removing: instances that share a data directory do not remove each other's objects in use
/// (the budget then holds per instance, not for the directory). Only regular files count
/// (a symbolic link planted in the directory is not followed). Cached files are trusted as the
/// local content store's are: whoever can write the data directory can change what it serves.
public final class CachedContentStore: ContentStore {
    public let remote: any ContentStore
    let local: LocalContentStore
    public let budget: Int64
    let logger: Logger
    /// The time uses and evictions go by (tests set their own).
    let clock: @Sendable () -> Date
    private let state = Mutex(State())

    /// Background fills at once.
    static let maxFills = 2
    static let recentUse: TimeInterval = 30
    static let touchInterval: TimeInterval = 10
    static let refillInterval: TimeInterval = 600
    /// Fill attempts remembered for ``refillInterval`` (older ones are dropped first).
    static let rememberedFills = 10_000

    private struct Entry {
        var size: Int64
        /// Last served from here (this process's clock).
        var used: Date
        /// Last time this process set the file's modification time.
        var touched: Date
        /// Its size was checked against the remote's since this process started (files an
        /// earlier run kept are served only once they were).
        var confirmed = true
    }

    private struct State {
        var entries: [String: Entry] = [:]
        var total: Int64 = 0
        var filling: Set<String> = []
        /// When each object was last fetched for the cache (or tried).
        var fetched: [String: Date] = [:]
        var hits: Int64 = 0
        var misses: Int64 = 0
    }

    /// What the cache holds and how it served, for logs and metrics.
    public struct Statistics: Sendable, Hashable {
        public var objects: Int
        public var bytes: Int64
        public var hits: Int64
        public var misses: Int64
    }

    /// Opens the cache at `directory` (created 0700 when missing) in front of `remote`, with
    /// `budget` bytes (> 0): indexes what an earlier run kept and removes its unfinished fills.
    public init(
        remote: any ContentStore, directory: String, budget: Int64, logger: Logger, clock: @escaping @Sendable () -> Date = { Date() }
    ) throws {
        precondition(budget > 0, "a cache without a budget is no cache")
        self.clock = clock
        self.remote = remote
        self.budget = budget
        self.logger = logger
        local = try LocalContentStore(root: directory)
        // An hour: another instance sharing the directory may be filling right now.
        try local.cleanTemporaryFiles(olderThan: 3600)
        let found = try local.objects()
        state.withLock { state in
            for object in found where object.size > 0 && Self.regularFileSize(local, object.sha256) == object.size {
                let used = object.modified ?? .distantPast
                state.entries[object.sha256] = Entry(size: object.size, used: used, touched: used, confirmed: false)
                state.total += object.size
            }
        }
        evict()
    }

    public var statistics: Statistics {
        state.withLock { Statistics(objects: $0.entries.count, bytes: $0.total, hits: $0.hits, misses: $0.misses) }
    }

    // MARK: Reads

    /// A cached object's size from its file (one `lstat`: a file removed behind the cache's
    /// back is a miss), else the remote's answer. A file an earlier run kept is first checked
    /// against the remote's size (a truncated or replaced file is removed, not served).
    public func size(sha256: String) async throws -> Int64? {
        guard let entry = state.withLock({ $0.entries[sha256] }) else { return try await remote.size(sha256: sha256) }
        guard let size = Self.regularFileSize(local, sha256), size > 0 else {
            forget(sha256)
            return try await remote.size(sha256: sha256)
        }
        if entry.confirmed { return size }
        let expected = try await remote.size(sha256: sha256)
        if expected == size {
            state.withLock { $0.entries[sha256]?.confirmed = true }
            return size
        }
        logger.warning("content cache: a kept file does not match the store's object, removed", metadata: ["sha256": "\(sha256)"])
        forget(sha256)
        if let file = local.localFile(sha256: sha256) { unlink(file.path) }
        return expected
    }

    /// The cached copy's file, or nil (then the server opens the remote object, which starts
    /// a fill).
    public func localFile(sha256: String) -> LocalContentFile? {
        let now = clock()
        let touch: Bool? = state.withLock { state in
            guard var entry = state.entries[sha256], entry.confirmed else {
                state.misses += 1
                return nil
            }
            state.hits += 1
            entry.used = now
            let due = now.timeIntervalSince(entry.touched) >= Self.touchInterval
            if due { entry.touched = now }
            state.entries[sha256] = entry
            return due
        }
        guard let touch, let file = local.localFile(sha256: sha256) else { return nil }
        // The file's time is what another instance's eviction checks.
        if touch { _ = utimes(file.path, nil) }
        return file
    }

    /// The remote object, streamed; a download from its start starts filling the cache with it.
    public func open(sha256: String, range: ClosedRange<Int64>) async throws -> AsyncThrowingStream<[UInt8], any Error>? {
        let stream = try await remote.open(sha256: sha256, range: range)
        if stream != nil, range.lowerBound == 0 { startFill(sha256) }
        return stream
    }

    /// The size of the object's file when it is a regular file (`lstat`: a link is not followed).
    static func regularFileSize(_ local: LocalContentStore, _ digest: String) -> Int64? {
        guard let file = local.localFile(sha256: digest) else { return nil }
        var info = stat()
        guard lstat(file.path, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        return Int64(info.st_size)
    }

    public func read(sha256: String, range: ClosedRange<Int64>) -> AsyncThrowingStream<[UInt8], any Error> {
        remote.read(sha256: sha256, range: range)
    }

    // MARK: Everything else is the remote's

    public func makeUpload(maxBytes: Int64, expectedSHA256: String?) async throws -> any ContentUpload {
        try await remote.makeUpload(maxBytes: maxBytes, expectedSHA256: expectedSHA256)
    }

    public func pinnedTag(sha256: String) async throws -> String? { try await remote.pinnedTag(sha256: sha256) }

    public func presignedURL(sha256: String, expires: Int, contentType: String, fileName: String, now: Date) -> String? {
        remote.presignedURL(sha256: sha256, expires: expires, contentType: contentType, fileName: fileName, now: now)
    }

    public func objects() async throws -> [StoredObject] { try await remote.objects() }

    /// Deletes the remote object and this copy.
    public func delete(sha256: String) async throws {
        try await remote.delete(sha256: sha256)
        try? local.delete(sha256: sha256)
        forget(sha256)
    }

    public func delete(sha256: String, ifNotModifiedAfter cutoff: Date) async throws -> Bool {
        let deleted = try await remote.delete(sha256: sha256, ifNotModifiedAfter: cutoff)
        if deleted {
            try? local.delete(sha256: sha256)
            forget(sha256)
        }
        return deleted
    }

    public func removeAbandonedUploads(olderThan: TimeInterval) async throws -> Int {
        try await remote.removeAbandonedUploads(olderThan: olderThan)
    }

    // MARK: Filling and evicting

    private func remember(_ digest: String, size: Int64) {
        let now = clock()
        state.withLock { state in
            if let old = state.entries[digest] { state.total -= old.size }
            state.total += size
            state.entries[digest] = Entry(size: size, used: now, touched: now)
        }
    }

    private func forget(_ digest: String) {
        state.withLock { state in
            if let entry = state.entries.removeValue(forKey: digest) { state.total -= entry.size }
        }
    }

    /// Starts a background fill of `digest` unless it is cached, being filled, was fetched in
    /// the last ``refillInterval``, or ``maxFills`` fills are running.
    private func startFill(_ digest: String) {
        guard LocalContentStore.isContentAddress(digest) else { return }
        let now = clock()
        let start = state.withLock { state in
            guard state.entries[digest] == nil, !state.filling.contains(digest), state.filling.count < Self.maxFills else { return false }
            if let last = state.fetched[digest], now.timeIntervalSince(last) < Self.refillInterval { return false }
            if state.fetched.count >= Self.rememberedFills {
                state.fetched = state.fetched.filter { now.timeIntervalSince($0.value) < Self.refillInterval }
                if state.fetched.count >= Self.rememberedFills { return false }
            }
            state.fetched[digest] = now
            state.filling.insert(digest)
            return true
        }
        guard start else { return }
        Task.detached { [self] in
            await fill(digest)
            state.withLock { _ = $0.filling.remove(digest) }
        }
    }

    /// Copies the whole object here, checked against its address; logs and gives up on any failure.
    func fill(_ digest: String) async {
        do {
            guard let size = try await remote.size(sha256: digest), size > 0 else { return }
            guard size <= budget / 4 else {
                logger.debug("content cache: object larger than a quarter of the budget, not kept", metadata: ["sha256": "\(digest)"])
                return
            }
            if state.withLock({ $0.total }) + size > budget + budget / 2 {
                try await FileWriteThreads.run { [self] in evict() }
                guard state.withLock({ $0.total }) + size <= budget + budget / 2 else {
                    logger.notice("content cache: full of recently used objects, one not kept", metadata: ["sha256": "\(digest)"])
                    return
                }
            }
            // Another instance sharing the directory kept it already (checked then: same
            // address, same size); anything else there — a link, a short file — goes.
            if let existing = Self.regularFileSize(local, digest), existing == size {
                remember(digest, size: size)
                return
            }
            if let file = local.localFile(sha256: digest) { unlink(file.path) }
            guard let chunks = try await remote.open(sha256: digest, range: 0...(size - 1)) else { return }
            // Hashed, written and fsynced on FileWriteThreads, off the requests' threads.
            let upload = try local.makeUpload(maxBytes: size, expectedSHA256: digest)
            do {
                for try await chunk in chunks { try await upload.append(chunk) }
                let written = try await upload.finish(expectedSHA256: digest)
                guard written.size == size else { throw ContentStoreError.io("the store sent \(written.size) bytes of \(size)") }
            } catch {
                await upload.abort()
                throw error
            }
            remember(digest, size: size)
            logger.info("content cache: kept an object", metadata: ["sha256": "\(digest)", "bytes": "\(size)"])
            // Unlinks of large files: there too. (Never cancelled: a detached task.)
            try? await FileWriteThreads.run { [self] in evict() }
        } catch {
            logger.warning("content cache: could not keep an object", metadata: ["sha256": "\(digest)", "error": "\(error)"])
        }
    }

    /// Removes the least recently used objects, none used in the last ``recentUse`` (by this
    /// process, or by another one sharing the directory: the file's time), until the cache is
    /// within its budget.
    func evict() {
        let now = clock()
        let cutoff = now.addingTimeInterval(-Self.recentUse)
        let (excess, candidates) = state.withLock { state -> (Int64, [String]) in
            guard state.total > budget else { return (0, []) }
            let idle = state.entries.filter { $0.value.used < cutoff }.sorted { $0.value.used < $1.value.used }
            return (state.total - budget, idle.map(\.key))
        }
        var remaining = excess
        for digest in candidates where remaining > 0 {
            // Out of the index first, still idle: from here no download is told its path.
            let claimed: Entry? = state.withLock { state in
                guard let entry = state.entries[digest], entry.used < cutoff else { return nil }
                state.entries[digest] = nil
                state.total -= entry.size
                return entry
            }
            guard let claimed else { continue }
            var deleted = false
            do {
                // Touched since (another instance serving it): kept.
                deleted = try local.delete(sha256: digest, ifNotModifiedAfter: cutoff)
            } catch {
                logger.warning("content cache: could not evict an object", metadata: ["sha256": "\(digest)", "error": "\(error)"])
            }
            if deleted {
                remaining -= claimed.size
            } else {
                state.withLock { state in
                    if state.entries[digest] == nil {
                        state.entries[digest] = claimed
                        state.total += claimed.size
                    }
                }
            }
        }
    }
}
