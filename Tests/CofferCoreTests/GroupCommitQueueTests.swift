import CofferCore
import Synchronization
import Testing

/// The group-commit queue's own rules, with a `write` the test holds open.
@Suite struct GroupCommitQueueTests {
    /// What `write` was given, and a gate each call waits at until the test opens it.
    final class Writes: Sendable {
        private let state = Mutex<(batches: [[Int]], waiting: [CheckedContinuation<Void, Never>], open: Bool)>(([], [], false))

        var batches: [[Int]] { state.withLock { $0.batches } }
        var waiting: Int { state.withLock { $0.waiting.count } }

        func write(_ batch: [Int]) async {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let open = state.withLock { s -> Bool in
                    s.batches.append(batch)
                    if !s.open { s.waiting.append(continuation) }
                    return s.open
                }
                if open { continuation.resume() }
            }
        }

        func open() {
            let waiting = state.withLock { s -> [CheckedContinuation<Void, Never>] in
                s.open = true
                defer { s.waiting = [] }
                return s.waiting
            }
            for continuation in waiting { continuation.resume() }
        }
    }

    @Test("jobs removed while a batch is being written never reach a batch, the others keep their order, and finish still returns")
    func removedJobsAreNeverWritten() async throws {
        let writes = Writes()
        let queue = GroupCommitQueue<Int>(maxBatch: 10, write: { await writes.write($0) }, refuse: { _ in Issue.record("refused") })
        queue.submit(1)
        // The first batch is held in `write`; what arrives meanwhile waits in the queue.
        let deadline = ContinuousClock.now + .seconds(10)
        while writes.waiting == 0 {
            try #require(ContinuousClock.now < deadline, "the first batch never reached write")
            try await Task.sleep(for: .milliseconds(5))
        }
        for job in 2...6 { queue.submit(job) }
        #expect(queue.remove(where: { $0 % 2 == 0 }) == [2, 4, 6])
        #expect(queue.remove(where: { $0 % 2 == 0 }).isEmpty, "each job is removed once")
        writes.open()
        await queue.finish()
        #expect(writes.batches == [[1], [3, 5]])
    }
}
