import CofferCore
import CofferTestSupport
import Crypto
import Dispatch
import Foundation
import Synchronization
import Testing

@testable import CofferStore

/// Uploads to a local store write, hash and fsync on FileWriteThreads: an fsync of a large
/// object held a thread of Swift's cooperative pool (two on a 2-core machine) for as long as
/// the disk took.
@Suite("PooledContentUpload")
struct PooledContentUploadTests {
    /// Each write(2), flush and fsync(2) of an object's file, and whether it ran inside a Swift task.
    final class Probe: Sendable {
        let calls = Mutex<[(io: LocalContentStore.FileIO, inTask: Bool)]>([])
        func record(_ io: LocalContentStore.FileIO) { calls.withLock { $0.append((io, withUnsafeCurrentTask { $0 != nil })) } }
        func count(_ io: LocalContentStore.FileIO) -> Int { calls.withLock { $0.filter { $0.io == io }.count } }
        var anyInTask: Bool { calls.withLock { $0.contains { $0.inTask } } }
    }

    /// `bytes` appended in 64 KiB chunks, as a request body arrives.
    static func upload(_ bytes: [UInt8], to store: LocalContentStore) async throws -> (sha256: String, size: Int64) {
        let upload = try store.makeUpload(maxBytes: Int64(bytes.count), expectedSHA256: nil)
        for start in stride(from: 0, to: bytes.count, by: 64 * 1024) {
            try await upload.append(bytes[start..<min(start + 64 * 1024, bytes.count)])
        }
        return try await upload.finish(expectedSHA256: nil)
    }

    static func bytes(_ count: Int, seed: UInt64) -> [UInt8] {
        var random = SplitMix64(state: seed)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count)
        while bytes.count < count {
            let next = random.next()
            withUnsafeBytes(of: next) { bytes.append(contentsOf: $0.prefix(count - bytes.count)) }
        }
        return bytes
    }

    @Test("writes and fsyncs run on the write threads, in 1 MiB batches, and the object is right")
    func writesRunOffTheTasksThreads() async throws {
        try await withTemporaryDirectory { dir in
            var store = try LocalContentStore(root: dir.path)
            let probe = Probe()
            store.beforeFileIO = { probe.record($0) }
            let bytes = Self.bytes(3 * PooledContentUpload.batchLength + 100, seed: 13)
            let stored = try await Self.upload(bytes, to: store)
            #expect(stored.sha256 == SHA256.hash(data: bytes).hexString)
            #expect(stored.size == Int64(bytes.count))
            let path = try #require(store.path(sha256: stored.sha256))
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == Data(bytes))
            // Four batches (three full, the rest at finish), not one write per chunk; one fsync.
            #expect(probe.count(.write) == 4)
            #expect(probe.count(.sync) == 1)
            #expect(!probe.anyInTask, "a write or fsync ran on a task's thread: \(probe.calls.withLock { $0 })")
        }
    }

    @Test("a large upload is flushed to the disk every 8 MiB as it arrives, off the tasks' threads too")
    func flushedAsItArrives() async throws {
        try await withTemporaryDirectory { dir in
            var store = try LocalContentStore(root: dir.path)
            let probe = Probe()
            store.beforeFileIO = { probe.record($0) }
            let bytes = Self.bytes(Int(2 * LocalContentUpload.flushEvery) + 4096, seed: 14)
            let stored = try await Self.upload(bytes, to: store)
            #expect(stored.sha256 == SHA256.hash(data: bytes).hexString)
            #expect(probe.count(.flush) == 2)
            #expect(probe.count(.sync) == 1)
            #expect(!probe.anyInTask)
        }
    }

    @Test("a chunk is cut at batch ends: exactly 1 MiB per write, and one large chunk is still flushed every 8 MiB")
    func batchesAreExact() async throws {
        try await withTemporaryDirectory { dir in
            var store = try LocalContentStore(root: dir.path)
            let probe = Probe()
            store.beforeFileIO = { probe.record($0) }
            // Three 700 KiB chunks: 1 MiB, 1 MiB, then the rest at finish.
            let upload = try store.makeUpload(maxBytes: 3 << 20, expectedSHA256: nil)
            let small = Self.bytes(3 * 700 * 1024, seed: 15)
            for start in stride(from: 0, to: small.count, by: 700 * 1024) { try await upload.append(small[start..<(start + 700 * 1024)]) }
            #expect(probe.count(.write) == 2)
            #expect(try await upload.finish(expectedSHA256: nil).sha256 == SHA256.hash(data: small).hexString)
            #expect(probe.count(.write) == 3)
            // One chunk of 16 MiB and 4 KiB: 16 writes and 2 flushes as it goes, the rest at finish.
            let large = Self.bytes(Int(2 * LocalContentUpload.flushEvery) + 4096, seed: 16)
            let whole = try store.makeUpload(maxBytes: Int64(large.count), expectedSHA256: nil)
            try await whole.append(large)
            #expect(probe.count(.write) == 3 + 16)
            #expect(probe.count(.flush) == 2)
            #expect(try await whole.finish(expectedSHA256: nil).sha256 == SHA256.hash(data: large).hexString)
            #expect(!probe.anyInTask)
        }
    }

    /// Holds the first write of an object's file until released.
    final class Gate: Sendable {
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let released = Atomic(false)
        let first = Atomic(true)
        func hold(_ io: LocalContentStore.FileIO) {
            guard io == .write, first.exchange(false, ordering: .relaxed) else { return }
            entered.signal()
            // Bounded: a test that failed before opening the gate must not hold a write thread.
            _ = release.wait(timeout: .now() + 30)
        }
        func open() {
            released.store(true, ordering: .sequentiallyConsistent)
            release.signal()
        }
    }

    @Test("a task cancelled while its batch is being written resumes only after the write: the writer is never used twice at once")
    func cancelledWhileWriting() async throws {
        try await withTemporaryDirectory { dir in
            var store = try LocalContentStore(root: dir.path)
            let gate = Gate()
            store.beforeFileIO = { gate.hold($0) }
            let upload = try store.makeUpload(maxBytes: 4 << 20, expectedSHA256: nil)
            let box = UploadBox(upload)
            let batch = Self.bytes(PooledContentUpload.batchLength, seed: 17)
            let task = Task { () -> Bool in
                try? await box.upload.append(batch)
                return gate.released.load(ordering: .sequentiallyConsistent)
            }
            let entered = await offThePool { gate.entered.wait(timeout: .now() + 30) }
            try #require(entered == .success, "the batch's write never started")
            task.cancel()
            // Not a wait for a condition: the time a task resumed too early would need to show it.
            try await Task.sleep(for: .milliseconds(50))
            gate.open()
            #expect(await task.value, "append returned while its write was still running")
            await upload.abort()
            #expect(filesBelow(dir).isEmpty)
        }
    }

    @Test("too large is refused at the append that crosses the limit, before any batch is full, and nothing is left")
    func tooLargeAtOnce() async throws {
        try await withTemporaryDirectory { dir in
            let store = try LocalContentStore(root: dir.path)
            let upload = try store.makeUpload(maxBytes: 1000, expectedSHA256: nil)
            try await upload.append(Self.bytes(600, seed: 1))
            await #expect(throws: ContentStoreError.tooLarge) { try await upload.append(Self.bytes(401, seed: 2)) }
            #expect(filesBelow(dir).isEmpty)
        }
    }

    @Test("a digest mismatch at finish discards the object")
    func mismatch() async throws {
        try await withTemporaryDirectory { dir in
            let store = try LocalContentStore(root: dir.path)
            let upload = try store.makeUpload(maxBytes: 10_000, expectedSHA256: nil)
            try await upload.append(Self.bytes(5000, seed: 3))
            await #expect(throws: ContentStoreError.digestMismatch) {
                _ = try await upload.finish(expectedSHA256: String(repeating: "0", count: 64))
            }
            #expect(filesBelow(dir).isEmpty)
        }
    }

    @Test("abort in a cancelled task still removes the partial file")
    func abortWhenCancelled() async throws {
        try await withTemporaryDirectory { dir in
            let store = try LocalContentStore(root: dir.path)
            let upload = try store.makeUpload(maxBytes: Int64(4 * PooledContentUpload.batchLength), expectedSHA256: nil)
            try await upload.append(Self.bytes(PooledContentUpload.batchLength + 1, seed: 4))
            #expect(!filesBelow(dir.appendingPathComponent("tmp")).isEmpty)
            // One task at a time: the upload moves into the cancelled task and back.
            let box = UploadBox(upload)
            await Task {
                withUnsafeCurrentTask { $0?.cancel() }
                await box.upload.abort()
            }.value
            #expect(filesBelow(dir).isEmpty)
        }
    }
}

/// Sends an upload to another task that uses it while this one waits. Safe: the sending
/// task does not touch the upload until `Task.value` has returned, so it is used from one
/// task at a time, as ``ContentUpload`` asks, and the task's completion orders its accesses
/// before the sender's next.
private struct UploadBox: @unchecked Sendable {
    let upload: any ContentUpload
    init(_ upload: any ContentUpload) { self.upload = upload }
}
