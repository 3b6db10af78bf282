import CofferCore
import Foundation
import GRDB

/// Group commit for the ledger: the redemptions and attempts that arrive while a transaction
/// is being written wait, then go together into the next transaction — one fsync for many
/// rows instead of one each. Each caller is answered only after the transaction holding its
/// row has committed (`synchronous = FULL`: on disk), and each row sits in its own savepoint,
/// so a replay (UNIQUE violation) or a failing row does not affect the others in its batch.
final class GroupCommitter: Sendable {
    typealias Job = LedgerWriteJob
    typealias Result = LedgerWriteJob.Result

    /// Rows per transaction at most (a bound on the latency one batch adds).
    static let maxBatch = 512

    private let queue: GroupCommitQueue<Job>

    init(db: CofferDatabase, checkpoints: CheckpointPolicy?) {
        self.queue = GroupCommitQueue(
            maxBatch: Self.maxBatch, write: { batch in await Self.write(batch, db: db, checkpoints: checkpoints) }, refuse: Self.refuse)
    }

    func insert(_ redemption: Redemption, refusals: InsertRefusals?) async throws -> LedgerInsertOutcome {
        try await withCheckedThrowingContinuation { queue.submit(.redemption(redemption, refusals, $0)) }
    }

    func record(_ attempt: RejectedAttempt) async throws {
        try await withCheckedThrowingContinuation { queue.submit(.attempt(attempt, $0)) }
    }

    /// Stops taking jobs (later ones get ``StoreError/closed``) and returns once every queued
    /// one is written (at shutdown, before the database closes).
    func finish() async { await queue.finish() }

    private static func refuse(_ job: Job) { job.fail(StoreError.closed) }

    private static func write(_ batch: [Job], db: CofferDatabase, checkpoints: CheckpointPolicy?) async {
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
            for job in batch { job.fail(error) }
            return
        }
        for (job, result) in zip(batch, results) { job.answer(result) }
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
            // A revocation reversed since (REFUND_REVERSED) no longer refuses it.
            if let revocation = try ChainStore.keyedRevocation(db, environment: redemption.environment, replayKey: key),
                try ChainStore.revocationHolds(db, environment: redemption.environment, replayKey: key)
            {
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
