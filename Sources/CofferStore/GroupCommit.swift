import CofferCore
import Foundation
import GRDB
import Synchronization

/// Group commit for the ledger: the redemptions and attempts that arrive while a transaction
/// is being written wait, then go together into the next transaction — one fsync for many
/// rows instead of one each. Each caller is answered only after the transaction holding its
/// row has committed (`synchronous = FULL`: on disk), and each row sits in its own savepoint,
/// so a replay (UNIQUE violation) or a failing row does not affect the others in its batch.
final class GroupCommitter: Sendable {
    enum Job: Sendable {
        /// A redemption, and the attempt to record instead if it is a replay.
        case redemption(Redemption, InsertRefusals?, CheckedContinuation<LedgerInsertOutcome, any Error>)
        case attempt(RejectedAttempt, CheckedContinuation<Void, any Error>?)
    }

    struct Queue {
        var jobs: [Job] = []
        var draining = false
        /// Set by ``finish()``: new jobs are refused (503), the queued ones are written.
        var finished = false
        /// ``finish()`` callers waiting for the queue to empty.
        var idle: [CheckedContinuation<Void, Never>] = []
    }

    /// Rows per transaction at most (a bound on the latency one batch adds).
    static let maxBatch = 512

    private let db: CofferDatabase
    private let checkpoints: CheckpointPolicy?
    private let queue = Mutex(Queue())

    init(db: CofferDatabase, checkpoints: CheckpointPolicy?) {
        self.db = db
        self.checkpoints = checkpoints
    }

    func insert(_ redemption: Redemption, refusals: InsertRefusals?) async throws -> LedgerInsertOutcome {
        try await withCheckedThrowingContinuation { submit(.redemption(redemption, refusals, $0)) }
    }

    func record(_ attempt: RejectedAttempt) async throws {
        try await withCheckedThrowingContinuation { submit(.attempt(attempt, $0)) }
    }

    /// Queues a job; the first job into an idle queue starts the drainer. After ``finish()``
    /// the job is refused with ``StoreError/closed``.
    private func submit(_ job: Job) {
        enum Next { case start, queued, refused }
        let next = queue.withLock { q -> Next in
            guard !q.finished else { return .refused }
            q.jobs.append(job)
            guard !q.draining else { return .queued }
            q.draining = true
            return .start
        }
        switch next {
        case .start: Task.detached { await self.drain() }
        case .queued: break
        case .refused:
            switch job {
            case .redemption(_, _, let continuation): continuation.resume(throwing: StoreError.closed)
            case .attempt(_, let continuation): continuation?.resume(throwing: StoreError.closed)
            }
        }
    }

    /// Stops taking jobs and returns once every queued one is written (at shutdown, before the
    /// database closes).
    func finish() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let idle = queue.withLock { q -> Bool in
                q.finished = true
                guard q.draining else { return true }
                q.idle.append(continuation)
                return false
            }
            if idle { continuation.resume() }
        }
    }

    /// Writes batches until the queue is empty. Only one drainer runs at a time.
    private func drain() async {
        while true {
            let (batch, idle) = queue.withLock { q -> ([Job], [CheckedContinuation<Void, Never>]) in
                let batch = Array(q.jobs.prefix(Self.maxBatch))
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

    private enum Result: Sendable {
        case inserted(Redemption)
        case alreadyRedeemed
        case revoked(Revocation)
        case recorded
        case failed(any Error)
    }

    private func write(_ batch: [Job]) async {
        let checkpoints = self.checkpoints
        let results: [Result]
        do {
            results = try await db.pool.write { db -> [Result] in
                // The batch extends the chain only where this server sealed it, and seals the new head.
                try ChainStore.sealed(db, policy: checkpoints, now: Date()) {
                    var results: [Result] = []
                    results.reserveCapacity(batch.count)
                    for job in batch {
                        var result = Result.recorded
                        do {
                            try db.inSavepoint {
                                result = try Self.apply(job, db: db, checkpoints: checkpoints)
                                return .commit
                            }
                        } catch {
                            result = .failed(error)
                        }
                        results.append(result)
                    }
                    return results
                }
            }
        } catch {
            // The transaction did not commit: nobody's row is durable.
            for job in batch {
                switch job {
                case .redemption(_, _, let c): c.resume(throwing: error)
                case .attempt(_, let c): c?.resume(throwing: error)
                }
            }
            return
        }
        for (job, result) in zip(batch, results) {
            switch (job, result) {
            case (.redemption(_, _, let c), .inserted(let row)): c.resume(returning: .inserted(row))
            case (.redemption(_, _, let c), .alreadyRedeemed): c.resume(returning: .alreadyRedeemed)
            case (.redemption(_, _, let c), .revoked(let revocation)): c.resume(returning: .revoked(revocation))
            case (.redemption(_, _, let c), .failed(let error)): c.resume(throwing: error)
            case (.attempt(_, let c), .failed(let error)): c?.resume(throwing: error)
            case (.attempt(_, let c), _): c?.resume()
            case (.redemption(_, _, let c), .recorded): c.resume(throwing: StoreError.invalidValue(column: "ledger", value: "no outcome"))
            }
        }
    }

    /// One row and its chain event, inside the batch's transaction.
    private static func apply(_ job: Job, db: Database, checkpoints: CheckpointPolicy?) throws -> Result {
        switch job {
        case .redemption(let redemption, let refusals, _):
            // A replay is the common refusal: found by an indexed read, not an exception. Writes
            // are serialised and this runs inside the write transaction, so nothing can insert
            // the same environment and replay key between the read and the INSERT; the UNIQUE
            // index `redemptions_replay` stays as the backstop.
            // A cached statement, as in ChainStore's head and append: generating and preparing
            // the SQL on every row was ~5% of the server's CPU under load.
            let key = redemption.effectiveReplayKey
            if try ChainStore.isRedeemed(db, environment: redemption.environment, replayKey: key) {
                if let refusals { _ = try apply(.attempt(refusals.replay, nil), db: db, checkpoints: checkpoints) }
                return .alreadyRedeemed
            }
            // A refund or revocation that arrived before the redemption is kept: the purchase
            // can no longer be redeemed. Checked in the same transaction as the INSERT, so a
            // notification and a redemption racing each other cannot both win.
            // Keyed lookup only: a revocation from before migration 0003 names a redemption, and
            // any redemption of this purchase has just been ruled out above.
            if let revocation = try ChainStore.keyedRevocation(db, environment: redemption.environment, replayKey: key) {
                if let refusals { _ = try apply(.attempt(refusals.revoked, nil), db: db, checkpoints: checkpoints) }
                return .revoked(revocation)
            }
            try RedemptionRecord(redemption).insert(db)
            var row = redemption
            row.sequence = db.lastInsertedRowID
            try ChainStore.append(db, policy: checkpoints, now: redemption.redeemedAt) { .redemption(row, sequence: $0) }
            return .inserted(row)
        case .attempt(let attempt, _):
            try AttemptRecord(attempt).insert(db)
            var row = attempt
            row.sequence = db.lastInsertedRowID
            try ChainStore.append(db, policy: checkpoints, now: attempt.at) { .attempt(row, sequence: $0) }
            return .recorded
        }
    }
}
