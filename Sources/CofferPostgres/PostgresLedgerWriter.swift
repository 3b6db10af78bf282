import CofferCore
import Foundation
import Logging
import PostgresNIO

/// Group commit on PostgreSQL: the redemptions and attempts that arrive while a batch is being
/// written go together into the next transaction — a fixed number of statements for the whole
/// batch (array parameters), and one flush on the server (`synchronous_commit`) for many
/// rows. Callers are answered only after that flush.
///
/// A batch takes the chain's advisory lock first (for its session: ``PostgresChain/take(_:purchases:logger:)``),
/// so batches of every instance are serialised in the database; the replay rule's reads run
/// after the lock, and the write (`coffer_append_commit`) lets the lock go only after its
/// COMMIT: no other instance can insert the same purchase in between, and the unique index
/// `redemptions_replay` stays as the backstop. That COMMIT does not wait for the flush; the
/// CALL waits for it after letting the lock go (migration 0005), so one instance's flush no
/// longer holds up the other's turn, and callers are still answered only once flushed.
final class PostgresLedgerWriter: Sendable {
    static let maxBatch = 512

    /// A job and when it was queued.
    struct Queued: Sendable {
        var job: LedgerWriteJob
        var since: ContinuousClock.Instant
    }

    private let queue: GroupCommitQueue<Queued>
    /// Answers 503 the jobs that waited out the deadline while a batch is stuck (the database
    /// holding its CALL: a lock, a frozen disk, synchronous standbys gone): ``unexpired(_:deadline:now:)``
    /// sees them only when the next batch starts. Checks once a second; ends at ``finish()``.
    private let sweeper: Task<Void, Never>?

    init(backend: PostgresBackend, checkpoints: CheckpointPolicy?) {
        let queue = GroupCommitQueue<Queued>(
            maxBatch: Self.maxBatch,
            write: { queued in
                guard let (batch, lease) = Self.unexpired(queued, deadline: backend.deadline, now: .now) else { return }
                // The whole batch, lock to COMMIT, on the backend's own thread (EventLoopTaskExecutor).
                await withTaskExecutorPreference(backend.executor) {
                    await Self.write(batch, lease: lease, backend: backend, checkpoints: checkpoints)
                }
            },
            refuse: { $0.job.fail(PostgresStoreError.closed) })
        self.queue = queue
        sweeper = backend.deadline.map { deadline in
            Task { [weak queue] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: .seconds(1))
                    guard let queue else { return }
                    let now = ContinuousClock.now
                    for item in queue.remove(where: { now - $0.since >= deadline }) { item.job.fail(PostgresStoreError.timedOut(deadline)) }
                }
            }
        }
    }

    deinit { sweeper?.cancel() }

    func insert(_ redemption: Redemption, refusals: InsertRefusals?) async throws -> LedgerInsertOutcome {
        try await withCheckedThrowingContinuation { queue.submit(Queued(job: .redemption(redemption, refusals, $0), since: .now)) }
    }

    func record(_ attempt: RejectedAttempt) async throws {
        try await withCheckedThrowingContinuation { queue.submit(Queued(job: .attempt(attempt, $0), since: .now)) }
    }

    func finish() async {
        await queue.finish()
        sweeper?.cancel()
    }

    /// The jobs of a batch still within `deadline` of being queued, and how long the batch may
    /// wait for its connection: what its oldest job has left. A job that waited out the
    /// deadline in the queue — the database down or stuck, the batches ahead of it each waiting
    /// for their connection — is answered 503 unwritten: its caller was promised an answer
    /// within the deadline, and a commit after it gave up would answer its every retry 409.
    /// Nil when no job is left. Without a deadline (tools), every job, no limit. (The queue
    /// never hands over an empty batch.)
    static func unexpired(_ queued: [Queued], deadline: Duration?, now: ContinuousClock.Instant) -> ([LedgerWriteJob], Duration?)? {
        guard let deadline else { return (queued.map(\.job), nil) }
        var jobs: [LedgerWriteJob] = []
        var oldest: ContinuousClock.Instant?
        for item in queued {
            if now - item.since >= deadline {
                item.job.fail(PostgresStoreError.timedOut(deadline))
            } else {
                jobs.append(item.job)
                oldest = min(oldest ?? item.since, item.since)
            }
        }
        guard let oldest else { return nil }
        return (jobs, deadline - (now - oldest))
    }

    private static func write(_ batch: [LedgerWriteJob], lease: Duration?, backend: PostgresBackend, checkpoints: CheckpointPolicy?) async {
        let results: [LedgerWriteJob.Result]
        do {
            // Two round trips: the chain's session lock and the reads, then the write, which
            // commits by itself, lets the lock go and then waits for the flush
            // (PostgresChain.take, migrations 0004 and 0005).
            results = try await backend.chainTurn(lease: lease) { c in
                let locked = try await PostgresChain.take(c, purchases: BatchPlan.purchases(batch), logger: backend.logger)
                if let checkpoints {
                    try await PostgresChain.checkSeal(c, policy: checkpoints, head: locked.head, seal: locked.seal, logger: backend.logger)
                }
                var plan = try await BatchPlan(batch, locked, c, logger: backend.logger)
                try await plan.write(c, backend: backend, policy: checkpoints, locked: locked)
                return plan.results
            }
        } catch {
            // The write statement did not commit: nobody's row is durable.
            for job in batch { job.fail(error) }
            return
        }
        for (job, result) in zip(batch, results) { job.answer(result) }
    }
}

/// What one batch writes, decided in job order from the replay rule's lookups made under the
/// chain's lock (``PostgresChain/lock(_:purchases:logger:)``): each redemption is
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

    /// The purchases of the batch's redemptions that can be stored (one holding U+0000 is
    /// refused on its own below; sent to the lookup it would fail the whole batch).
    static func purchases(_ batch: [LedgerWriteJob]) -> [PurchaseKey] {
        batch.compactMap { job in
            guard case .redemption(let r, _, _) = job, unstorable(.redemption(r, sequence: 1)) == nil else { return nil }
            return PurchaseKey(r)
        }
    }

    init(_ batch: [LedgerWriteJob], _ locked: PostgresChain.Locked, _ c: PostgresConnection, logger: Logger) async throws {
        results = Array(repeating: .recorded, count: batch.count)
        var redeemed = locked.redeemed
        // Revocations are rare: their rows are read only when one matches.
        let revoked = try await PostgresReplayRule.holding(
            c, try await PostgresReplayRule.revocations(c, sequences: locked.revoked, logger: logger), logger: logger)
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

    /// Numbers the rows from the lock's next numbers, chains their events in job order and
    /// writes it all in one statement; fills in the results.
    mutating func write(_ c: PostgresConnection, backend: PostgresBackend, policy: CheckpointPolicy?, locked: PostgresChain.Locked) async throws {
        let logger = backend.logger
        let redemptionNumbers = try PostgresLedgerWriterNumbers.numbers(from: locked.nextRedemption, count: redemptions.count, table: "redemptions")
        let attemptNumbers = try PostgresLedgerWriterNumbers.numbers(from: locked.nextAttempt, count: attempts.count, table: "attempts")
        for i in redemptions.indices { redemptions[i].sequence = redemptionNumbers[i] }
        for i in attempts.indices { attempts[i].sequence = attemptNumbers[i] }
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
        let linked = try PostgresChain.link(policy: policy, head: locked.head, now: Date(), entries: entries)
        guard !linked.sequences.isEmpty else {
            // Nothing to write (every job refused as unstorable): let the lock go.
            await PostgresChain.letGo(c, logger: logger)
            return
        }
        do {
            // A CALL that ran long may have had its wait for synchronous standbys ended by the
            // statement timeout, reported as done: flushed in a COMMIT statement, which no
            // timer ends, before anyone is answered.
            let start = ContinuousClock.now
            try await PostgresRows.write(
                c, redemptions: redemptions, attempts: attempts, linked: linked, release: PostgresChain.lockKey, logger: logger)
            if ContinuousClock.now - start >= PostgresChain.shortestTimer {
                logger.warning("a ledger write took over a second: flushing it in a statement of its own before answering")
                try await PostgresChain.flush(c, logger: logger)
            }
        } catch {
            // A CALL that failed may still have committed (an error after its COMMIT, the
            // answer lost): the batch's last event says. Committed rows are never answered
            // 503 — once flushed: that COMMIT did not wait for the flush (migration 0005).
            guard let last = linked.sequences.last, let hash = linked.hashes.last else { throw error }
            switch await Self.committedAndFlushed(c, backend: backend, sequence: last, hash: hash, failure: error) {
            case .committed:
                logger.warning("the ledger write reported an error after it committed", metadata: ["error": "\(error)"])
                await PostgresChain.letGo(c, logger: logger)
            case .notCommitted:
                throw error
            case .unknown:
                // Answered 503 all the same; the vault keeps the redemptions for their retries
                // (InDoubtRedemptions), which get them if this did commit.
                logger.error(
                    "a ledger write's outcome is not known: it may have committed (its retries are answered with it if so)",
                    metadata: [
                        "error": "\(error)", "sequence": "\(last)",
                        "redemptions": "\(redemptions.map(\.redemptionId).joined(separator: " "))",
                    ])
                throw LedgerWriteInDoubt(PostgresStoreError.wrapping(error), redemptionIds: Set(redemptions.map(\.redemptionId)))
            }
        }
    }

    /// What the check after a failed write found.
    enum Settled {
        case committed
        /// Rolled back: the check read the chain under its lock, or on the session that ran it.
        case notCommitted
        /// Could not be asked (the server down, or a committed batch whose flush failed).
        case unknown
    }

    /// Whether the event at `sequence` holds `hash` and the WAL is now flushed through it —
    /// asked on `c`, or, when that fails (the connection dropped, its session terminated
    /// during the CALL's flush), on a connection of the shared pool (of the probe's pool when
    /// `failure` was the connection's silence, ``SilenceWatch``): a batch that committed
    /// is then answered as committed, not 503 with every retry a 409. There the chain's lock
    /// is taken first (no `lock_timeout`): a session the client side lost (a reset by a NAT or a
    /// proxy) may still be running the CALL, holding the lock until it has committed or rolled
    /// back — read before that, the batch would look uncommitted and then commit.
    private static func committedAndFlushed(
        _ c: PostgresConnection, backend: PostgresBackend, sequence: Int64, hash: String, failure: any Error
    ) async -> Settled {
        let logger = backend.logger
        if !c.isClosed, let answer = try? await Self.committed(c, sequence: sequence, hash: hash, logger: logger) {
            guard answer else { return .notCommitted }
            return (try? await PostgresChain.flush(c, logger: logger)) != nil ? .committed : .unknown
        }
        // Up to three tries: what broke this connection (a reset) may have broken the pool's
        // too, and the pool hands out a dead one once before it knows. A slow failure (the
        // lock not granted within lock_timeout, a flush that timed out) is final, unless it was
        // a dead connection's silence. When this connection went silent, the shared pool's
        // may all be a lost server's, each costing the silence bound: the probe's own pool
        // (a fresh connection) asks.
        let pool: PostgresBackend.Pool = PostgresConnection.lostSession(failure) ? .probe : .shared
        for _ in 0..<3 {
            let start = ContinuousClock.now
            do {
                let committed = try await backend.transaction(on: pool) { c in
                    // As long as the CALL may hold the lock: lock_timeout's 10 s is shorter than the
                    // CALL's statement_timeout, and a CALL that commits after this check gave up
                    // was answered 503 with every retry a 409. This statement's own timeout began
                    // after the CALL's, so it outlasts it.
                    try await c.checkedQuery("SET LOCAL lock_timeout = 0", logger: logger)
                    try await c.checkedQuery("SELECT pg_advisory_xact_lock(\(PostgresChain.lockKey))", logger: logger)
                    return try await Self.committed(c, sequence: sequence, hash: hash, logger: logger)
                }
                guard committed else { return .notCommitted }
                try await backend.read(on: pool) { c in try await PostgresChain.flush(c, logger: logger) }
                return .committed
            } catch {
                if ContinuousClock.now - start > .seconds(1) && !PostgresConnection.lostSession(error) { return .unknown }
            }
        }
        return .unknown
    }

    private static func committed(_ c: PostgresConnection, sequence: Int64, hash: String, logger: Logger) async throws -> Bool {
        try await PostgresChain.eventHash(c, sequence: sequence, logger: logger) == hash
    }
}

/// Row numbers for a batch, from the next number the database gave under the chain's lock.
enum PostgresLedgerWriterNumbers {
    /// `count` numbers from `first` — which the database gave (a row inserted behind the
    /// servers' backs sets it): out of range is a storage failure (503), never an overflow.
    static func numbers(from first: Int64, count: Int, table: String) throws -> [Int64] {
        guard first >= 1, count >= 0, first <= Int64.max - Int64(count) else {
            throw PostgresStoreError.invalidValue(column: "\(table).sequence", value: "next number \(first)")
        }
        return (0..<Int64(count)).map { first + $0 }
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

/// The replay rule's revocation lookups (the redeemed lookup runs in `coffer_lock_chain`).
enum PostgresReplayRule {
    /// The kept revocations of `keys`, by purchase.
    static func revocations(_ c: PostgresConnection, _ keys: [PurchaseKey], logger: Logger) async throws -> [PurchaseKey: Revocation] {
        guard !keys.isEmpty else { return [:] }
        let found = try await c.rows(
            """
            SELECT \(unescaped: Revocation.columns) FROM revocations
            WHERE (coalesce(environment, ''), coalesce(replay_key, transaction_id)) IN (SELECT * FROM unnest(\(keys.map(\.environment))::text[], \(keys.map(\.key))::text[]))
            """, logger: logger, Revocation.init(row:))
        return byPurchase(found)
    }

    /// The revocations with these sequences, by purchase.
    static func revocations(_ c: PostgresConnection, sequences: [Int64], logger: Logger) async throws -> [PurchaseKey: Revocation] {
        guard !sequences.isEmpty else { return [:] }
        let found = try await c.rows(
            "SELECT \(unescaped: Revocation.columns) FROM revocations WHERE sequence = ANY(\(sequences)::bigint[])", logger: logger,
            Revocation.init(row:))
        return byPurchase(found)
    }

    /// Of `revocations`, those that hold: one a purchase's chained events reverse
    /// (``Entitlement/revocationHolds(afterEventKinds:)``) is left out. A query only when a
    /// revocation matched.
    static func holding(_ c: PostgresConnection, _ revocations: [PurchaseKey: Revocation], logger: Logger) async throws -> [PurchaseKey: Revocation] {
        guard !revocations.isEmpty else { return [:] }
        let keys = Array(revocations.keys)
        let kinds = Entitlement.revocationKinds.map(\.rawValue)
        let found = try await c.rows(
            """
            SELECT p.environment, p.replay_key, p.kind FROM purchase_events p
            WHERE (p.environment, p.replay_key) IN (SELECT * FROM unnest(\(keys.map(\.environment))::text[], \(keys.map(\.key))::text[]))
              AND p.kind = ANY(\(kinds)::text[])
              AND EXISTS (SELECT 1 FROM ledger_events e WHERE e.sequence > 0 AND e.kind = 'purchaseEvent' AND e.row_sequence = p.sequence)
            ORDER BY p.sequence
            """, logger: logger
        ) { row in
            (PurchaseKey(environment: try row.value("environment"), key: try row.value("replay_key")), try row.value("kind", String.self))
        }
        // In chain order within each purchase (grouping keeps the rows' order).
        let kindsByKey = Dictionary(grouping: found, by: \.0).mapValues { $0.map(\.1) }
        return revocations.filter { Entitlement.revocationHolds(afterEventKinds: kindsByKey[$0.key] ?? []) }
    }

    private static func byPurchase(_ found: [Revocation]) -> [PurchaseKey: Revocation] {
        var byKey: [PurchaseKey: Revocation] = [:]
        for revocation in found {
            byKey[PurchaseKey(environment: revocation.environment ?? "", key: revocation.replayKey ?? revocation.transactionId)] = revocation
        }
        return byKey
    }
}
