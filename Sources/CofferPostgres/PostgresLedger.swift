import CofferCore
import Foundation
import PostgresNIO

/// The replay ledger, rejected attempts and revocations in PostgreSQL, shared by every
/// instance on the database.
///
/// The replay guarantee: one redemption per (environment, replay key). Redemptions and
/// attempts are group-committed (``PostgresLedgerWriter``); every write that appends to the
/// hash chain holds the chain's advisory lock, so the instances extend one linear chain and a
/// purchase checked as unredeemed cannot be inserted by another instance before this one
/// commits; the unique index `redemptions_replay` backs that up.
public struct PostgresLedger: LedgerRepository {
    let backend: PostgresBackend
    /// Signs checkpoints and the seal; nil for tools that hold no key (they only read).
    public let checkpoints: CheckpointPolicy?
    private let writer: PostgresLedgerWriter

    public init(_ backend: PostgresBackend, checkpoints: CheckpointPolicy? = nil) {
        self.backend = backend
        self.checkpoints = checkpoints
        self.writer = PostgresLedgerWriter(backend: backend, checkpoints: checkpoints)
    }

    /// Inserts a redemption, group-committed; returns once the COMMIT returned (flushed on the
    /// server with `synchronous_commit` on).
    public func insert(_ redemption: Redemption, refusals: InsertRefusals?) async throws -> LedgerInsertOutcome {
        try await writer.insert(redemption, refusals: refusals)
    }

    public func record(_ attempt: RejectedAttempt) async throws { try await writer.record(attempt) }

    /// Stops taking redemptions and attempts (they get a 503) and returns once every queued one
    /// is committed. At shutdown, before the pool closes.
    public func finishWrites() async { await writer.finish() }

    public func revoke(_ revocation: Revocation, keepUnredeemed: Bool, logging: AdminAction?) async throws -> RevocationOutcome {
        let key = PurchaseKey(environment: revocation.environment ?? "", key: revocation.replayKey ?? revocation.transactionId)
        let logger = backend.logger
        return try await backend.transaction { [checkpoints] c in
            try await PostgresChain.sealed(c, policy: checkpoints, purchases: [key], logger: logger) { locked -> RevocationOutcome in
                if !locked.revoked.isEmpty { return .alreadyRevoked }
                let redemptionIds = try await Self.redemptionIds(c, key, logger: logger)
                // A revocation copied from before SQLite's migration 0003 names the redemption instead.
                if try await Self.legacyRevocation(c, of: redemptionIds, logger: logger) != nil { return .alreadyRevoked }
                let redemptionId = redemptionIds.first
                if redemptionId == nil && !keepUnredeemed { return .notRedeemed }
                var row = revocation
                row.redemptionId = redemptionId ?? ""
                try PostgresChain.checkStorable(.revocation(row, sequence: 1))
                row.sequence =
                    try await c.column(
                        """
                        INSERT INTO revocations (redemption_id, transaction_id, revoked_at, reason, source, reference, recorded_at, environment, replay_key)
                        VALUES (\(row.redemptionId), \(row.transactionId), \(row.revokedAt.timeIntervalSince1970), \(row.reason), \(row.source.rawValue),
                          \(row.reference), \(row.recordedAt.timeIntervalSince1970), \(row.environment), \(row.replayKey))
                        RETURNING sequence
                        """, Int64.self, logger: logger
                    ).first ?? 0
                let stored = row
                var entries: [(Int64) -> LedgerEntry] = [{ .revocation(stored, sequence: $0) }]
                if let logging {
                    let action = try await PostgresChain.insertRow(c, AdminAction.escapedForLedger(logging), logger: logger)
                    entries.append { .adminAction(action, sequence: $0) }
                }
                try await PostgresChain.append(
                    c, policy: checkpoints, head: locked.head, now: revocation.recordedAt, entries: entries, logger: logger)
                return redemptionId == nil ? .recordedUnredeemed(stored) : .revoked(stored)
            }
        }
    }

    /// The redemptions of a purchase, oldest first: by environment and replay key, and (rows
    /// copied from a SQLite ledger older than its migration 0003) by original transaction id.
    static func redemptionIds(_ c: PostgresConnection, _ key: PurchaseKey, logger: Logger) async throws -> [String] {
        try await c.column(
            """
            (SELECT redemption_id FROM redemptions WHERE environment = \(key.environment) AND coalesce(replay_key, transaction_id) = \(key.key) LIMIT 1)
            UNION ALL
            (SELECT redemption_id FROM redemptions WHERE original_transaction_id = \(key.key) AND replay_key IS NULL AND environment = \(key.environment)
             ORDER BY sequence LIMIT 10)
            """, String.self, logger: logger)
    }

    /// A revocation copied from a SQLite ledger older than its migration 0003 (no environment,
    /// no replay key) naming one of these redemptions, the oldest such redemption first.
    static func legacyRevocation(_ c: PostgresConnection, of redemptionIds: [String], logger: Logger) async throws -> Revocation? {
        for id in redemptionIds {
            if let legacy = try await c.rows(
                "SELECT \(unescaped: Revocation.columns) FROM revocations WHERE redemption_id = \(id) AND environment IS NULL LIMIT 1",
                logger: logger, Revocation.init(row:)
            ).first {
                return legacy
            }
        }
        return nil
    }

    public func revocation(of redemption: Redemption) async throws -> Revocation? {
        let logger = backend.logger
        return try await backend.read { c in
            if let byId = try await c.rows(
                "SELECT \(unescaped: Revocation.columns) FROM revocations WHERE redemption_id = \(redemption.redemptionId) LIMIT 1", logger: logger,
                Revocation.init(row:)
            ).first {
                return byId
            }
            if let keyed = try await PostgresReplayRule.revocations(c, [PurchaseKey(redemption)], logger: logger).values.first { return keyed }
            // A revocation copied from before SQLite's migration 0003 names a redemption of this purchase.
            return try await Self.legacyRevocation(c, of: try await Self.redemptionIds(c, PurchaseKey(redemption), logger: logger), logger: logger)
        }
    }

    /// A flush (`PostgresChain.flush`): its COMMIT waits for the WAL, and the synchronous
    /// standbys, through everything committed before it — a batch committed asynchronously
    /// (migration 0005) whose own flush was not seen.
    public func ensureDurable() async throws {
        let logger = backend.logger
        try await backend.read { c in try await PostgresChain.flush(c, logger: logger) }
    }

    public func revocation(environment: String, replayKey: String) async throws -> Revocation? {
        let logger = backend.logger
        let key = PurchaseKey(environment: environment, key: replayKey)
        return try await backend.read { c in
            if let keyed = try await PostgresReplayRule.revocations(c, [key], logger: logger).values.first { return keyed }
            return try await Self.legacyRevocation(c, of: try await Self.redemptionIds(c, key, logger: logger), logger: logger)
        }
    }

    public func revocations(after: Int64, limit: Int) async throws -> [Revocation] {
        try await backend.read { c in
            try await c.rows(
                "SELECT \(unescaped: Revocation.columns) FROM revocations WHERE sequence > \(after) ORDER BY sequence LIMIT \(max(0, limit))",
                logger: backend.logger, Revocation.init(row:))
        }
    }

    /// The chained redemption whose grant hash is `grantHash`: a row no event chains (inserted
    /// behind the server's back) grants nothing.
    public func redemption(grantHash: String) async throws -> Redemption? {
        try await backend.read { c in
            try await c.rows(
                """
                SELECT \(unescaped: Redemption.columns) FROM redemptions r WHERE r.grant_hash = \(grantHash)
                  AND EXISTS (SELECT 1 FROM ledger_events e WHERE e.sequence > 0 AND e.kind = 'redemption' AND e.row_sequence = r.sequence)
                """, logger: backend.logger, Redemption.init(row:)
            ).first
        }
    }

    public func redemptions(_ f: AuditFilter) async throws -> [Redemption] {
        var query = AuditQuery(table: "redemptions", columns: Redemption.columns, time: "redeemed_at", filter: f)
        query.equal("transaction_id", f.transactionId)
        query.equal("original_transaction_id", f.originalTransactionId)
        query.equal("product_id", f.productId)
        query.equal("bundle_id", f.bundleId)
        query.equal("player_id", f.playerId)
        let built = query.query
        // Flushed before it is answered, like the chained events: a writer's batch is visible
        // before its flush (migration 0005), and an auditor's cursor must never pass a row
        // that a crash then loses and the next batch numbers again.
        return try await backend.read { c in
            try await PostgresChain.flushed(c, logger: backend.logger) { try await c.rows(built, logger: backend.logger, Redemption.init(row:)) }
        }
    }

    public func hourlyCounts(from: Date, to: Date) async throws -> [HourlyCount] {
        let lo = from.timeIntervalSince1970
        let hi = to.timeIntervalSince1970
        return try await backend.read { c in
            try await PostgresChain.flushed(c, logger: backend.logger) {
                let redemptions = try await c.rows(
                    "SELECT floor(redeemed_at / 3600)::bigint AS h, count(*) AS n FROM redemptions WHERE redeemed_at >= \(lo) AND redeemed_at < \(hi) GROUP BY h",
                    logger: backend.logger
                ) { (try $0.value("h", Int64.self), Int(try $0.value("n", Int64.self))) }
                let refused = try await c.rows(
                    "SELECT floor(at / 3600)::bigint AS h, count(*) AS n FROM attempts WHERE at >= \(lo) AND at < \(hi) GROUP BY h",
                    logger: backend.logger
                ) { (try $0.value("h", Int64.self), Int(try $0.value("n", Int64.self))) }
                return HourlyCount.merge(redemptions: redemptions, refused: refused)
            }
        }
    }

    public func attempts(_ f: AuditFilter) async throws -> [RejectedAttempt] {
        var query = AuditQuery(table: "attempts", columns: RejectedAttempt.columns, time: "at", filter: f)
        query.equal("transaction_id", f.transactionId)
        query.equal("product_id", f.productId)
        query.equal("code", f.code)
        let built = query.query
        // Flushed before it is answered (as ``redemptions(_:)``).
        return try await backend.read { c in
            try await PostgresChain.flushed(c, logger: backend.logger) { try await c.rows(built, logger: backend.logger, RejectedAttempt.init(row:)) }
        }
    }
}

/// An audit page: `sequence > after`, each set equality, `from` (inclusive) and `to`
/// (exclusive) on the time column; in ledger order, at most `limit`.
struct AuditQuery {
    private var conditions: [String] = []
    private var bindings = PostgresBindings()
    private let table: String
    private let columns: String
    private let limit: Int

    init(table: String, columns: String, time: String, filter: AuditFilter) {
        self.table = table
        self.columns = columns
        self.limit = max(0, filter.limit)
        bind("sequence >", filter.after)
        if let from = filter.from { bind("\(time) >=", from.timeIntervalSince1970) }
        if let to = filter.to { bind("\(time) <", to.timeIntervalSince1970) }
    }

    mutating func equal(_ column: String, _ value: String?) {
        if let value { bind("\(column) =", value) }
    }

    private mutating func bind(_ condition: String, _ value: some PostgresNonThrowingEncodable) {
        bindings.append(value)
        conditions.append("\(condition) $\(bindings.count)")
    }

    var query: PostgresQuery {
        PostgresQuery(
            unsafeSQL: "SELECT \(columns) FROM \(table) WHERE \(conditions.joined(separator: " AND ")) ORDER BY sequence LIMIT \(limit)",
            binds: bindings)
    }
}
