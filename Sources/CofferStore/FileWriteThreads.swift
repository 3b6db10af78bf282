import CofferCore
import NIOPosix

/// The threads that write content files: an upload's bytes, their hash, fsync and rename, and
/// the cache's fills and evictions.
///
/// Not Swift's cooperative pool: it has one thread per core (two on the machines Coffer is
/// measured on) and every request's work runs there. An fsync of a 300 MB file took 0.2 s on
/// this VM, seconds while the disk is busy; two at once (two uploads, or the cache's two
/// fills) held every thread of that pool, and no redemption, download or health check moved
/// meanwhile. Nor NIO's blocking pool: `FileStream` reads downloads' chunks there, and they
/// would queue behind a write's fsync.
public enum FileWriteThreads {
    /// Two: as many as the cache fills at once (``CachedContentStore/maxFills``); more
    /// uploads at once take turns here, each batch at a time.
    private static let pool: NIOThreadPool = {
        let pool = NIOThreadPool(numberOfThreads: 2)
        pool.start()
        return pool
    }()

    /// Runs `body` on one of these threads. A task cancelled while `body` waits for a thread
    /// gets a `CancellationError` and `body` never runs; one that has started runs to its end.
    public static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await pool.runIfActive(body)
    }
}

/// A ``LocalContentUpload`` driven from async code: the bytes are gathered here into batches
/// of ``batchLength`` and each batch is hashed and written on ``FileWriteThreads``, as are
/// the fsyncs and the rename of ``finish(expectedSHA256:)``. One thread hop per MiB, not per
/// body chunk (a request body arrives in chunks of a few KiB to 64 KiB).
public final class PooledContentUpload: ContentUpload {
    public static let batchLength = 1024 * 1024

    /// The writer, handed to one of ``FileWriteThreads`` for one batch at a time.
    ///
    /// Safe to send although ``LocalContentUpload`` is a plain class: it is used only through
    /// this upload, which (like every ``ContentUpload``) is used from one task at a time, and
    /// that task awaits each job it hands over before it hands over the next or touches the
    /// writer itself. `runIfActive` resumes the task only after the job has returned (or, when
    /// cancelled before it started, without running it), so no two accesses ever overlap, and
    /// the pool's completion orders each job's writes before the task's next access.
    private struct Handoff: @unchecked Sendable {
        let writer: LocalContentUpload
    }

    private let handoff: Handoff
    private let maxBytes: Int64
    private var batch: [UInt8] = []
    /// The writer is done with: finished, failed (a writer that throws has removed its file)
    /// or aborted. ``abort()`` then returns at once, with no trip to the write threads.
    private var ended = false
    /// Bytes taken so far (written or in ``batch``): the writer's own count lags by a batch,
    /// and `maxBytes` is enforced here at once.
    private var size: Int64 = 0

    public init(_ writer: LocalContentUpload, maxBytes: Int64) {
        handoff = Handoff(writer: writer)
        self.maxBytes = maxBytes
    }

    /// Takes the bytes, writing each batch as it fills: exactly ``batchLength`` bytes at a time
    /// (a chunk that crosses the end of one starts the next; a large one is cut in pieces).
    /// Throws ``ContentStoreError/tooLarge`` at once (and discards the object) when the total
    /// would exceed `maxBytes`.
    public func append(_ bytes: some Collection<UInt8>) async throws {
        guard !ended else { throw ContentStoreError.io("upload is closed") }
        guard Int64(bytes.count) <= maxBytes - size else {
            await abort()
            throw ContentStoreError.tooLarge
        }
        size += Int64(bytes.count)
        var index = bytes.startIndex
        while index != bytes.endIndex {
            if batch.isEmpty { batch.reserveCapacity(Self.batchLength) }
            let end = bytes.index(index, offsetBy: Self.batchLength - batch.count, limitedBy: bytes.endIndex) ?? bytes.endIndex
            batch.append(contentsOf: bytes[index..<end])
            index = end
            if batch.count == Self.batchLength { try await flush() }
        }
    }

    public func finish(expectedSHA256: String?) async throws -> (sha256: String, size: Int64) {
        try await flush()
        return try await run(ends: true) { try $0.finish(expectedSHA256: expectedSHA256) }
    }

    /// Discards the object: closes and removes its file on the write threads too (the unlink
    /// of a large file frees its blocks), or here when the task is cancelled before one of
    /// them takes the job.
    public func abort() async {
        batch = []
        guard !ended else { return }
        ended = true
        let handoff = handoff
        do { try await FileWriteThreads.run { handoff.writer.abort() } } catch { handoff.writer.abort() }
    }

    private func flush() async throws {
        guard !batch.isEmpty else { return }
        let full = batch
        batch = []
        try await run(ends: false) { try $0.append(full) }
    }

    /// Runs `body` with the writer on the write threads. After a job that `ends` it, or one
    /// that threw (the writer then removed its file), the writer is ended; a job cancelled
    /// before it ran leaves it open for ``abort()``.
    private func run<T: Sendable>(ends: Bool, _ body: @escaping @Sendable (LocalContentUpload) throws -> T) async throws -> T {
        let handoff = handoff
        do {
            let result = try await FileWriteThreads.run { try body(handoff.writer) }
            if ends { ended = true }
            return result
        } catch let cancelled as CancellationError {
            throw cancelled
        } catch {
            ended = true
            throw error
        }
    }
}
