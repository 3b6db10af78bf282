import CofferCore
import Foundation
import PostgresNIO

// Purchase events (restores, renewals, subscription status, refund outcomes) and the
// redemption lookup that restores and renewals need (migration 0003_players).
extension PostgresLedger {
    /// The chained redemption of a purchase: by environment and replay key, or — rows copied
    /// from a SQLite ledger older than its migration 0003 — by original transaction id.
    public func redemption(environment: String, replayKey: String) async throws -> Redemption? {
        let logger = backend.logger
        return try await backend.read { c in
            guard let id = try await Self.redemptionIds(c, PurchaseKey(environment: environment, key: replayKey), logger: logger).first else {
                return nil
            }
            return try await c.rows(
                """
                SELECT \(unescaped: Redemption.columns) FROM redemptions r WHERE r.redemption_id = \(id)
                  AND EXISTS (SELECT 1 FROM ledger_events e WHERE e.sequence > 0 AND e.kind = 'redemption' AND e.row_sequence = r.sequence)
                """, logger: logger, Redemption.init(row:)
            ).first
        }
    }

    /// Appends the event and its chain event under the chain's lock; a notification already
    /// recorded (its UUID) is `.duplicate`.
    public func append(_ event: PurchaseEvent, logging: AdminAction?) async throws -> PurchaseEventOutcome {
        let e = PurchaseEvent.escapedForLedger(event)
        let logger = backend.logger
        return try await backend.transaction { [checkpoints] c in
            try await PostgresChain.sealed(c, policy: checkpoints, logger: logger) { locked -> PurchaseEventOutcome in
                if e.source == .notification,
                    try await !c.column(
                        "SELECT 1 FROM purchase_events WHERE source = 'notification' AND reference = \(e.reference) LIMIT 1", Int32.self,
                        logger: logger
                    ).isEmpty
                {
                    return .duplicate
                }
                try PostgresChain.checkStorable(.purchaseEvent(e, sequence: 1))
                var row = e
                row.sequence =
                    try await c.column(
                        """
                        INSERT INTO purchase_events (at, kind, environment, replay_key, redemption_id, transaction_id, detail, source, reference,
                          player_id, expires_at, grace_until)
                        VALUES (\(e.at.timeIntervalSince1970), \(e.kind), \(e.environment), \(e.replayKey), \(e.redemptionId), \(e.transactionId),
                          \(e.detail), \(e.source.rawValue), \(e.reference), \(e.playerId), \(e.expiresAt?.timeIntervalSince1970),
                          \(e.graceUntil?.timeIntervalSince1970))
                        RETURNING sequence
                        """, Int64.self, logger: logger
                    ).first ?? 0
                let stored = row
                var entries: [(Int64) -> LedgerEntry] = [{ .purchaseEvent(stored, sequence: $0) }]
                if let logging {
                    let action = try await PostgresChain.insertRow(c, AdminAction.escapedForLedger(logging), logger: logger)
                    entries.append { .adminAction(action, sequence: $0) }
                }
                try await PostgresChain.append(c, policy: checkpoints, head: locked.head, now: e.at, entries: entries, logger: logger)
                return .appended(stored)
            }
        }
    }

    /// The chained events of one purchase, oldest first (a row inserted behind the servers' backs changes nothing).
    public func purchaseEvents(environment: String, replayKey: String) async throws -> [PurchaseEvent] {
        try await backend.read { c in
            try await c.rows(
                """
                SELECT \(unescaped: PurchaseEvent.columns) FROM purchase_events p
                WHERE p.environment = \(environment) AND p.replay_key = \(replayKey)
                  AND EXISTS (SELECT 1 FROM ledger_events e WHERE e.sequence > 0 AND e.kind = 'purchaseEvent' AND e.row_sequence = p.sequence)
                ORDER BY p.sequence
                """, logger: backend.logger, PurchaseEvent.init(row:))
        }
    }

    public func purchaseEvents(after: Int64, limit: Int) async throws -> [PurchaseEvent] {
        try await backend.read { c in
            try await c.rows(
                "SELECT \(unescaped: PurchaseEvent.columns) FROM purchase_events WHERE sequence > \(after) ORDER BY sequence LIMIT \(max(0, limit))",
                logger: backend.logger, PurchaseEvent.init(row:))
        }
    }
}

/// Delivery evidence in PostgreSQL (`deliveries`): one row per redemption, asset and digest.
public struct PostgresDeliveries: DeliveryRepository {
    private let backend: PostgresBackend

    public init(_ backend: PostgresBackend) { self.backend = backend }

    /// Key of the advisory lock a batch holds until it commits ("coffdlvr"). Rows are numbered
    /// by an identity, handed out when inserted: without the lock, another instance's batch
    /// could take a smaller number and commit after a larger one was read, and an auditor's
    /// `sequence > cursor` page would skip that row for good. Under it numbers are handed out
    /// in commit order (batches are small and once a second per instance).
    static let numberingLock: Int64 = 0x636f_6666_646c_7672

    /// Adds every report in one statement (an upsert of the unnested reports), under
    /// ``numberingLock``.
    public func record(_ reports: [Delivery]) async throws {
        // One row per key in a statement: ON CONFLICT cannot touch a row twice.
        var merged: [String: Delivery] = [:]
        var order: [String] = []
        for r in reports {
            let key = [r.redemptionId, r.assetId, r.sha256].joined(separator: "\u{0}")
            if merged[key] == nil {
                order.append(key)
                merged[key] = r
            } else {
                merged[key]?.merge(r)
            }
        }
        let rows = order.compactMap { merged[$0] }
        guard !rows.isEmpty else { return }
        try await backend.transaction { c in
            try await c.checkedQuery("SELECT pg_advisory_xact_lock(\(Self.numberingLock))", logger: backend.logger)
            try await c.checkedQuery(
                """
                INSERT INTO deliveries (redemption_id, asset_id, sha256, first_at, last_at, downloads, completed, bytes_served, complete)
                SELECT * FROM unnest(\(rows.map(\.redemptionId))::text[], \(rows.map(\.assetId))::text[], \(rows.map(\.sha256))::text[],
                  \(rows.map { $0.firstAt.timeIntervalSince1970 })::float8[], \(rows.map { $0.lastAt.timeIntervalSince1970 })::float8[],
                  \(rows.map(\.downloads))::int8[], \(rows.map(\.completed))::int8[], \(rows.map(\.bytesServed))::int8[], \(rows.map(\.complete))::bool[])
                ON CONFLICT (redemption_id, asset_id, sha256) DO UPDATE SET
                  first_at = least(deliveries.first_at, excluded.first_at), last_at = greatest(deliveries.last_at, excluded.last_at),
                  downloads = deliveries.downloads + excluded.downloads, completed = deliveries.completed + excluded.completed,
                  bytes_served = deliveries.bytes_served + excluded.bytes_served, complete = deliveries.complete OR excluded.complete
                """, logger: backend.logger)
        }
    }

    public func deliveries(redemptionId: String?, after: Int64, limit: Int) async throws -> [Delivery] {
        try await backend.read { c in
            if let redemptionId {
                return try await c.rows(
                    """
                    SELECT \(unescaped: Delivery.columns) FROM deliveries WHERE sequence > \(after) AND redemption_id = \(redemptionId)
                    ORDER BY sequence LIMIT \(max(0, limit))
                    """, logger: backend.logger, Delivery.init(row:))
            }
            return try await c.rows(
                "SELECT \(unescaped: Delivery.columns) FROM deliveries WHERE sequence > \(after) ORDER BY sequence LIMIT \(max(0, limit))",
                logger: backend.logger, Delivery.init(row:))
        }
    }
}
