import CofferCore
import Foundation
import GRDB

// Purchase events (restores, renewals, subscription status, refund outcomes) and the
// redemption lookup that restores and renewals need (migration 0004).
extension SQLiteLedger {
    /// The chained redemption of a purchase: by environment and replay key, or — for rows from
    /// before migration 0003 — by original transaction id.
    public func redemption(environment: String, replayKey: String) async throws -> Redemption? {
        try await db.pool.read { db in
            guard let id = try ChainStore.redemptionIds(db, environment: environment, replayKey: replayKey).first else { return nil }
            return try RedemptionRecord.fetchOne(
                db,
                sql: """
                    SELECT r.* FROM redemptions r WHERE r.redemption_id = ?
                      AND EXISTS (SELECT 1 FROM ledger_events e WHERE e.sequence > 0 AND e.kind = 'redemption' AND e.row_sequence = r.sequence)
                    """, arguments: [id]
            )?.redemption
        }
    }

    /// Appends the event and its chain event in one sealed transaction; a notification already
    /// recorded (its UUID) is `.duplicate`.
    public func append(_ event: PurchaseEvent, logging: AdminAction?) async throws -> PurchaseEventOutcome {
        let stored = PurchaseEvent.escapedForLedger(event)
        return try await db.pool.write { [checkpoints] db in
            if stored.source == .notification,
                try Bool.fetchOne(
                    db, sql: "SELECT EXISTS (SELECT 1 FROM purchase_events WHERE source = 'notification' AND reference = ?)",
                    arguments: [stored.reference]) == true
            {
                return .duplicate
            }
            return try ChainStore.sealed(db, policy: checkpoints, now: stored.at) {
                let appended = try ChainStore.insert(db, stored, policy: checkpoints)
                if let logging { try ChainStore.insert(db, AdminAction.escapedForLedger(logging), policy: checkpoints) }
                return .appended(appended)
            }
        }
    }

    /// The chained events of one purchase, oldest first.
    public func purchaseEvents(environment: String, replayKey: String) async throws -> [PurchaseEvent] {
        try await db.pool.read { db in
            // Only chained rows count: one inserted behind the server's back changes nothing.
            try PurchaseEventRecord.fetchAll(
                db,
                sql: """
                    SELECT p.* FROM purchase_events p WHERE p.environment = ? AND p.replay_key = ?
                      AND EXISTS (SELECT 1 FROM ledger_events e WHERE e.sequence > 0 AND e.kind = 'purchaseEvent' AND e.row_sequence = p.sequence)
                    ORDER BY p.sequence
                    """, arguments: [environment, replayKey]
            ).map { try $0.event() }
        }
    }

    public func purchaseEvents(after: Int64, limit: Int) async throws -> [PurchaseEvent] {
        try await db.pool.read { db in try PurchaseEventRecord.page(after: after, limit: max(0, limit)).fetchAll(db).map { try $0.event() } }
    }
}

/// Delivery evidence in SQLite (`deliveries`): one row per redemption, asset and digest.
public struct SQLiteDeliveries: DeliveryRepository {
    let db: CofferDatabase

    public init(_ db: CofferDatabase) { self.db = db }

    /// Adds every report in one transaction (an upsert per row).
    public func record(_ reports: [Delivery]) async throws {
        guard !reports.isEmpty else { return }
        try await db.pool.write { db in
            let statement = try db.cachedStatement(
                sql: """
                    INSERT INTO deliveries (redemption_id, asset_id, sha256, first_at, last_at, downloads, completed, bytes_served, complete)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (redemption_id, asset_id, sha256) DO UPDATE SET
                      first_at = min(first_at, excluded.first_at), last_at = max(last_at, excluded.last_at),
                      downloads = downloads + excluded.downloads, completed = completed + excluded.completed,
                      bytes_served = bytes_served + excluded.bytes_served, complete = max(complete, excluded.complete)
                    """)
            for r in reports {
                try statement.execute(arguments: [
                    r.redemptionId, r.assetId, r.sha256, r.firstAt.unixSeconds, r.lastAt.unixSeconds, r.downloads, r.completed, r.bytesServed,
                    r.complete,
                ])
            }
        }
    }

    public func deliveries(redemptionId: String?, after: Int64, limit: Int) async throws -> [Delivery] {
        try await db.pool.read { db in
            var request = DeliveryRecord.filter(DeliveryRecord.Columns.sequence > after)
            if let redemptionId { request = request.filter(DeliveryRecord.Columns.redemptionId == redemptionId) }
            return try request.order(DeliveryRecord.Columns.sequence).limit(max(0, limit)).fetchAll(db).map(\.delivery)
        }
    }
}
