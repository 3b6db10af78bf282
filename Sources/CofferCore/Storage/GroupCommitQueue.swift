import Synchronization

/// The queue of a group-commit writer: jobs that arrive while a batch is being written wait,
/// then go together into the next one. One drainer runs at a time; `write` answers every job
/// of its batch (each job carries its own continuation). Backends differ only in `write`.
public final class GroupCommitQueue<Job: Sendable>: Sendable {
    struct State {
        var jobs: [Job] = []
        var draining = false
        /// Set by ``finish()``: new jobs are refused, the queued ones are written.
        var finished = false
        /// ``finish()`` callers waiting for the queue to empty.
        var idle: [CheckedContinuation<Void, Never>] = []
    }

    private enum Next { case start, queued, refused }

    private let maxBatch: Int
    private let write: @Sendable ([Job]) async -> Void
    private let refuse: @Sendable (Job) -> Void
    private let state = Mutex(State())

    /// `write` writes one batch of at most `maxBatch` jobs and answers each; `refuse` answers a
    /// job submitted after ``finish()``.
    public init(maxBatch: Int, write: @escaping @Sendable ([Job]) async -> Void, refuse: @escaping @Sendable (Job) -> Void) {
        self.maxBatch = max(1, maxBatch)
        self.write = write
        self.refuse = refuse
    }

    /// Queues a job; the first job into an idle queue starts the drainer.
    public func submit(_ job: Job) {
        let next = state.withLock { q -> Next in
            guard !q.finished else { return .refused }
            q.jobs.append(job)
            guard !q.draining else { return .queued }
            q.draining = true
            return .start
        }
        switch next {
        case .start: Task.detached { await self.drain() }
        case .queued: break
        case .refused: refuse(job)
        }
    }

    /// Removes the queued jobs — not yet in a batch — that `picked` picks, in order, for the
    /// caller to answer: a writer whose batch is stuck answers the jobs that waited too long
    /// behind it.
    public func remove(where picked: (Job) -> Bool) -> [Job] {
        state.withLock { q in
            var removed: [Job] = []
            q.jobs.removeAll { job in
                guard picked(job) else { return false }
                removed.append(job)
                return true
            }
            return removed
        }
    }

    /// Stops taking jobs and returns once every queued one is written (at shutdown, before the
    /// storage closes).
    public func finish() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let idle = state.withLock { q -> Bool in
                q.finished = true
                guard q.draining else { return true }
                q.idle.append(continuation)
                return false
            }
            if idle { continuation.resume() }
        }
    }

    /// Writes batches until the queue is empty.
    private func drain() async {
        while true {
            let (batch, idle) = state.withLock { q -> ([Job], [CheckedContinuation<Void, Never>]) in
                let batch = Array(q.jobs.prefix(maxBatch))
                q.jobs.removeFirst(batch.count)
                guard batch.isEmpty else { return (batch, []) }
                q.draining = false
                defer { q.idle = [] }
                return (batch, q.idle)
            }
            if batch.isEmpty {
                for waiter in idle { waiter.resume() }
                return
            }
            await write(batch)
        }
    }
}
