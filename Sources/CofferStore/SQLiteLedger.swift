import CofferCore
import Foundation
import GRDB

/// The replay ledger, rejected attempts and revocations in SQLite.
///
/// The replay guarantee (since migration 0003): one redemption per (environment, replay key).
/// Writes are serialised, and inside the write transaction (see ``GroupCommitter``) a purchase
/// already redeemed is found by an indexed read and refused; the unique index
/// `redemptions_replay` backs that up, so two concurrent redemptions of one purchase can never
/// both succeed.
public struct SQLiteLedger: LedgerRepository {
    let db: CofferDatabase
    /// Signs checkpoints; nil keeps the hash chain without signing (tools that only read).
    public let checkpoints: CheckpointPolicy?

    private let committer: GroupCommitter

    /// A ledger stored in `db`. Every row it writes is appended to the hash chain in the same
    /// transaction; `checkpoints` signs one every `every` entries.
    public init(_ db: CofferDatabase, checkpoints: CheckpointPolicy? = nil) {
        self.db = db
        self.checkpoints = checkpoints
        self.committer = GroupCommitter(db: db, checkpoints: checkpoints)
    }

    /// Inserts a redemption (a plain INSERT, group-committed with concurrent writes: see
    /// ``GroupCommitter``). Returns `.alreadyRedeemed` when the ledger already holds a redemption
    /// of the same environment and replay key (or, for rows from before migration 0003, of the
    /// same original transaction id), `.revoked` when a kept revocation matches them, otherwise
    /// the stored row with its assigned `sequence`; the matching attempt of `refusals` is then
    /// recorded in the same transaction. Returns once the transaction is committed
    /// (`synchronous = FULL`). Other errors, including a unique violation on `redemption_id` or
    /// `grant_hash`, propagate.
    public func insert(_ redemption: Redemption, refusals: InsertRefusals?) async throws -> LedgerInsertOutcome {
        try await committer.insert(redemption, refusals: refusals)
    }

    /// Appends a rejected attempt (its `sequence` is assigned by SQLite), group-committed
    /// like redemptions.
    public func record(_ attempt: RejectedAttempt) async throws {
        try await committer.record(attempt)
    }

    /// Stops taking redemptions and attempts (they get ``StoreError/closed``, a 503) and returns
    /// once every queued one is committed. At shutdown, before the database closes.
    public func finishWrites() async { await committer.finish() }

    /// Appends a revocation and its chain event in one transaction (see
    /// ``LedgerRepository/revoke(_:keepUnredeemed:)``).
    public func revoke(_ revocation: Revocation, keepUnredeemed: Bool, logging: AdminAction?) async throws -> RevocationOutcome {
        let key = revocation.replayKey ?? revocation.transactionId
        return try await db.pool.write { [checkpoints] db in
            try ChainStore.sealed(db, policy: checkpoints, now: revocation.recordedAt) { () throws -> RevocationOutcome in
                let outcome = try Self.revoke(db, revocation, key: key, keepUnredeemed: keepUnredeemed, checkpoints: checkpoints)
                switch outcome {
                case .revoked, .recordedUnredeemed:
                    if let logging { try ChainStore.insert(db, AdminAction.escapedForLedger(logging), policy: checkpoints) }
                case .alreadyRevoked, .notRedeemed: break
                }
                return outcome
            }
        }
    }

    private static func revoke(_ db: Database, _ revocation: Revocation, key: String, keepUnredeemed: Bool, checkpoints: CheckpointPolicy?) throws
        -> RevocationOutcome
    {
        if try ChainStore.revocation(db, environment: revocation.environment, replayKey: key) != nil { return .alreadyRevoked }
        // Rows from before migration 0003 are keyed by transaction id: their original id matches too.
        let redemptionId = try ChainStore.redemptionIds(db, environment: revocation.environment ?? "", replayKey: key).first
        if redemptionId == nil && !keepUnredeemed { return .notRedeemed }
        var row = revocation
        row.redemptionId = redemptionId ?? ""
        row = try ChainStore.insert(db, row)
        let stored = row
        try ChainStore.append(db, policy: checkpoints, now: revocation.recordedAt) { .revocation(stored, sequence: $0) }
        return redemptionId == nil ? .recordedUnredeemed(stored) : .revoked(stored)
    }

    /// The revocation naming this redemption, or else the revocation of its purchase: by
    /// environment and replay key, or (rows from before migration 0003) by the redemption it names.
    public func revocation(of redemption: Redemption) async throws -> Revocation? {
        try await db.pool.read { db in
            if let byId = try RevocationRecord.filter(RevocationRecord.Columns.redemptionId == redemption.redemptionId).fetchOne(db) {
                return try byId.revocation()
            }
            return try ChainStore.revocation(db, environment: redemption.environment, replayKey: redemption.effectiveReplayKey)
        }
    }

    public func revocation(environment: String, replayKey: String) async throws -> Revocation? {
        try await db.pool.read { db in try ChainStore.revocation(db, environment: environment, replayKey: replayKey) }
    }

    /// Revocations with `sequence > after`, in order, at most `limit`.
    public func revocations(after: Int64, limit: Int) async throws -> [Revocation] {
        try await db.pool.read { db in
            try RevocationRecord.page(after: after, limit: max(0, limit)).fetchAll(db).map { try $0.revocation() }
        }
    }

    /// The chained redemption whose grant hash is `grantHash`, if any: a row no ledger event
    /// chains (inserted behind the server's back) grants nothing.
    public func redemption(grantHash: String) async throws -> Redemption? {
        try await db.pool.read { db in
            try RedemptionRecord.fetchOne(
                db,
                sql: """
                    SELECT r.* FROM redemptions r WHERE r.grant_hash = ?
                      AND EXISTS (SELECT 1 FROM ledger_events e WHERE e.sequence > 0 AND e.kind = 'redemption' AND e.row_sequence = r.sequence)
                    """, arguments: [grantHash]
            )?.redemption
        }
    }

    /// Redemptions matching every set field of `filter` (`from` inclusive, `to` exclusive on
    /// `redeemedAt`; `code` is ignored), with `sequence > after`, in ledger order, at most `limit`.
    public func redemptions(_ filter: AuditFilter) async throws -> [Redemption] {
        try await db.pool.read { db in try RedemptionRecord.audit(filter).fetchAll(db).map(\.redemption) }
    }

    /// Rejected attempts matching every set field of `filter` that applies to attempts
    /// (`transactionId`, `productId`, `code`, `from` inclusive and `to` exclusive on `at`),
    /// with `sequence > after`, in order, at most `limit`.
    public func attempts(_ filter: AuditFilter) async throws -> [RejectedAttempt] {
        try await db.pool.read { db in try AttemptRecord.audit(filter).fetchAll(db).map(\.attempt) }
    }

    public func hourlyCounts(from: Date, to: Date) async throws -> [HourlyCount] {
        let range: StatementArguments = [from.timeIntervalSince1970, to.timeIntervalSince1970]
        return try await db.pool.read { db in
            // Times are positive unix seconds: CAST truncates to the hour (no math functions needed).
            func counts(_ table: String, _ column: String) throws -> [(Int64, Int)] {
                try Row.fetchAll(
                    db,
                    sql:
                        "SELECT CAST(\(column) / 3600 AS INTEGER) AS h, COUNT(*) AS n FROM \(table) WHERE \(column) >= ? AND \(column) < ? GROUP BY h",
                    arguments: range
                ).map { ($0["h"], $0["n"]) }
            }
            return HourlyCount.merge(redemptions: try counts("redemptions", "redeemed_at"), refused: try counts("attempts", "at"))
        }
    }
}
