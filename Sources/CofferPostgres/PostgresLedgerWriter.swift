import CofferCore
import Foundation
import Logging
import PostgresNIO

/// Group commit on PostgreSQL: the redemptions and attempts that arrive while a batch is being
/// written go together into the next transaction — a fixed number of statements for the whole
/// batch (array parameters), and one commit flushed on the server (`synchronous_commit`) for
/// many rows. Callers are answered only after that COMMIT returned.
///
/// The transaction takes the chain's advisory lock first, so batches of every instance are
/// serialised in the database; the replay rule's reads run after the lock, in the same
/// transaction as the inserts: no other instance can insert the same purchase between them,
/// and the unique index `redemptions_replay` stays as the backstop.
final class PostgresLedgerWriter: Sendable {
    static let maxBatch = 512

    private let queue: GroupCommitQueue<LedgerWriteJob>

    init(backend: PostgresBackend, checkpoints: CheckpointPolicy?) {
        queue = GroupCommitQueue(
            maxBatch: Self.maxBatch, write: { batch in await Self.write(batch, backend: backend, checkpoints: checkpoints) },
            refuse: { $0.fail(PostgresStoreError.closed) })
    }

    func insert(_ redemption: Redemption, refusals: InsertRefusals?) async throws -> LedgerInsertOutcome {
        try await withCheckedThrowingContinuation { queue.submit(.redemption(redemption, refusals, $0)) }
    }

    func record(_ attempt: RejectedAttempt) async throws {
        try await withCheckedThrowingContinuation { queue.submit(.attempt(attempt, $0)) }
    }

    func finish() async { await queue.finish() }

    private static func write(_ batch: [LedgerWriteJob], backend: PostgresBackend, checkpoints: CheckpointPolicy?) async {
        let results: [LedgerWriteJob.Result]
        do {
            results = try await backend.transaction { c in
                try await PostgresChain.sealed(c, policy: checkpoints, now: Date(), logger: backend.logger) { head in
                    var plan = try await BatchPlan(batch, c, logger: backend.logger)
                    let newHead = try await plan.write(c, policy: checkpoints, head: head, logger: backend.logger)
                    return (plan.results, newHead)
                }
            }
        } catch {
            // The transaction did not commit: nobody's row is durable.
            for job in batch { job.fail(error) }
            return
        }
        for (job, result) in zip(batch, results) { job.answer(result) }
    }
}

/// What one batch writes, decided in job order from two indexed lookups: each redemption is
/// inserted, or refused as a replay (also of an earlier job of the same batch) or as revoked,
/// its refusal attempt recorded in its place; attempts are recorded. Each job adds at most one
/// chain event, in job order.
private struct BatchPlan {
    private enum Row {
        case redemption(Int)
        case attempt(Int)
    }

    private(set) var results: [LedgerWriteJob.Result]
    private var redemptions: [Redemption] = []
    private var attempts: [RejectedAttempt] = []
    /// The row each job appends to the chain, in job order (nil: none).
    private var rows: [Row?] = []

    init(_ batch: [LedgerWriteJob], _ c: PostgresConnection, logger: Logger) async throws {
        results = Array(repeating: .recorded, count: batch.count)
        var wanted: [PurchaseKey] = []
        for job in batch { if case .redemption(let r, _, _) = job { wanted.append(PurchaseKey(r)) } }
        var redeemed = try await PostgresReplayRule.redeemed(c, wanted, logger: logger)
        let revoked = try await PostgresReplayRule.revocations(c, wanted, logger: logger)
        for (index, job) in batch.enumerated() {
            switch job {
            case .redemption(let redemption, let refusals, _):
                let key = PurchaseKey(redemption)
                if redeemed.contains(key) {
                    results[index] = .alreadyRedeemed
                    add(refusals?.replay)
                } else if let revocation = revoked[key] {
                    results[index] = .revoked(revocation)
                    add(refusals?.revoked)
                } else if let invalid = Self.unstorable(.redemption(redemption, sequence: 1)) {
                    results[index] = .failed(invalid)
                    rows.append(nil)
                } else {
                    redeemed.insert(key)
                    rows.append(.redemption(redemptions.count))
                    redemptions.append(redemption)
                }
            case .attempt(let attempt, _):
                if let invalid = Self.unstorable(.attempt(attempt, sequence: 1)) {
                    results[index] = .failed(invalid)
                    rows.append(nil)
                } else {
                    add(attempt)
                }
            }
        }
    }

    private mutating func add(_ attempt: RejectedAttempt?) {
        guard let attempt, Self.unstorable(.attempt(attempt, sequence: 1)) == nil else {
            rows.append(nil)
            return
        }
        rows.append(.attempt(attempts.count))
        attempts.append(attempt)
    }

    private static func unstorable(_ entry: LedgerEntry) -> (any Error)? {
        do { try PostgresChain.checkStorable(entry) } catch { return error }
        return nil
    }

    /// Inserts the rows, then their chain events in job order; fills in the results.
    mutating func write(_ c: PostgresConnection, policy: CheckpointPolicy?, head: PostgresChain.Head, logger: Logger) async throws
        -> PostgresChain.Head
    {
        let redemptionSequences = try await PostgresRows.insert(redemptions, c, logger: logger)
        let attemptSequences = try await PostgresRows.insert(attempts, c, logger: logger)
        for i in redemptions.indices { redemptions[i].sequence = redemptionSequences[i] }
        for i in attempts.indices { attempts[i].sequence = attemptSequences[i] }
        var entries: [(Int64) -> LedgerEntry] = []
        for (job, row) in zip(results.indices, rows) {
            switch row {
            case .redemption(let i)?:
                let stored = redemptions[i]
                results[job] = .inserted(stored)
                entries.append { .redemption(stored, sequence: $0) }
            case .attempt(let i)?:
                let stored = attempts[i]
                entries.append { .attempt(stored, sequence: $0) }
            case nil: break
            }
        }
        return try await PostgresChain.append(c, policy: policy, head: head, now: Date(), entries: entries, logger: logger)
    }
}

/// A purchase as the replay rule keys it: environment and replay key.
struct PurchaseKey: Hashable {
    var environment: String
    var key: String

    init(environment: String, key: String) {
        self.environment = environment
        self.key = key
    }

    init(_ r: Redemption) { self.init(environment: r.environment, key: r.effectiveReplayKey) }
}

/// The replay rule's lookups for many purchases at once (one indexed search each, one round trip).
enum PostgresReplayRule {
    /// The purchases of `keys` already redeemed: by environment and replay key, or — rows copied
    /// from a SQLite ledger older than its migration 0003, keyed by their transaction id — by
    /// original transaction id.
    static func redeemed(_ c: PostgresConnection, _ keys: [PurchaseKey], logger: Logger) async throws -> Set<PurchaseKey> {
        guard !keys.isEmpty else { return [] }
        let environments = keys.map(\.environment)
        let replayKeys = keys.map(\.key)
        let found = try await c.rows(
            """
            SELECT environment, coalesce(replay_key, transaction_id) AS k FROM redemptions
            WHERE (environment, coalesce(replay_key, transaction_id)) IN (SELECT * FROM unnest(\(environments)::text[], \(replayKeys)::text[]))
            UNION ALL
            SELECT environment, original_transaction_id AS k FROM redemptions
            WHERE replay_key IS NULL AND (environment, original_transaction_id) IN (SELECT * FROM unnest(\(environments)::text[], \(replayKeys)::text[]))
            """, logger: logger
        ) { PurchaseKey(environment: try $0.value("environment"), key: try $0.value("k")) }
        return Set(found)
    }

    /// The kept revocations of `keys`, by purchase.
    static func revocations(_ c: PostgresConnection, _ keys: [PurchaseKey], logger: Logger) async throws -> [PurchaseKey: Revocation] {
        guard !keys.isEmpty else { return [:] }
        let found = try await c.rows(
            """
            SELECT \(unescaped: Revocation.columns) FROM revocations
            WHERE (coalesce(environment, ''), coalesce(replay_key, transaction_id)) IN (SELECT * FROM unnest(\(keys.map(\.environment))::text[], \(keys.map(\.key))::text[]))
            """, logger: logger, Revocation.init(row:))
        var byKey: [PurchaseKey: Revocation] = [:]
        for revocation in found {
            byKey[PurchaseKey(environment: revocation.environment ?? "", key: revocation.replayKey ?? revocation.transactionId)] = revocation
        }
        return byKey
    }
}
