import CofferCore
import GRDB

// The replay rule's lookups: one redemption and one revocation per (environment, replay key).
// They run inside the write transaction of every redemption: cached statements, each one
// indexed search.
extension ChainStore {
    /// The revocation stored with this environment and replay key (rows written since migration 0003).
    static func keyedRevocation(_ db: Database, environment: String?, replayKey: String) throws -> Revocation? {
        let statement = try db.cachedStatement(
            sql: "SELECT * FROM revocations WHERE coalesce(environment, '') = ? AND coalesce(replay_key, transaction_id) = ? LIMIT 1")
        return try RevocationRecord.fetchOne(statement, arguments: [environment ?? "", replayKey])?.revocation()
    }

    /// Whether a purchase's kept revocation holds: unless its chained events reverse it
    /// (``Entitlement/revocationHolds(afterEventKinds:)``). Read only when a revocation matches.
    static func revocationHolds(_ db: Database, environment: String?, replayKey: String) throws -> Bool {
        let statement = try db.cachedStatement(
            sql: """
                SELECT p.kind FROM purchase_events p WHERE p.environment = ? AND p.replay_key = ? AND p.kind IN (?, ?)
                  AND EXISTS (SELECT 1 FROM ledger_events e WHERE e.sequence > 0 AND e.kind = 'purchaseEvent' AND e.row_sequence = p.sequence)
                ORDER BY p.sequence
                """)
        let kinds = Entitlement.revocationKinds.map(\.rawValue)
        return Entitlement.revocationHolds(
            afterEventKinds: try String.fetchAll(statement, arguments: [environment ?? "", replayKey, kinds[0], kinds[1]]))
    }

    /// The revocation of a purchase, also one from before migration 0003: those carry no
    /// environment or key but name the redemption they revoked, which carries both. Every
    /// lookup is one indexed search (an OR across columns would scan the table).
    static func revocation(_ db: Database, environment: String?, replayKey: String) throws -> Revocation? {
        if let found = try keyedRevocation(db, environment: environment, replayKey: replayKey) { return found }
        let legacy = try db.cachedStatement(sql: "SELECT * FROM revocations WHERE redemption_id = ? AND environment IS NULL LIMIT 1")
        for redemptionId in try redemptionIds(db, environment: environment ?? "", replayKey: replayKey) {
            if let found = try RevocationRecord.fetchOne(legacy, arguments: [redemptionId]) { return try found.revocation() }
        }
        return nil
    }

    /// The redemptions of a purchase, oldest first: by environment and replay key, and — for rows
    /// from before migration 0003, keyed by their transaction id — by original transaction id.
    static func redemptionIds(_ db: Database, environment: String, replayKey: String) throws -> [String] {
        let keyed = try db.cachedStatement(
            sql: "SELECT redemption_id FROM redemptions WHERE environment = ? AND coalesce(replay_key, transaction_id) = ? LIMIT 1")
        let legacy = try db.cachedStatement(
            sql: """
                SELECT redemption_id FROM redemptions WHERE original_transaction_id = ? AND replay_key IS NULL AND environment = ?
                ORDER BY sequence LIMIT 10
                """)
        return try String.fetchAll(keyed, arguments: [environment, replayKey]) + String.fetchAll(legacy, arguments: [replayKey, environment])
    }

    /// Whether a redemption of this purchase is in the ledger: same environment and replay key,
    /// or — for rows from before migration 0003, keyed by their transaction id — the same
    /// original transaction id (a non-consumable restored then was redeemed under a new id).
    static func isRedeemed(_ db: Database, environment: String, replayKey: String) throws -> Bool {
        let keyed = try db.cachedStatement(
            sql: "SELECT 1 FROM redemptions WHERE environment = ? AND coalesce(replay_key, transaction_id) = ? LIMIT 1")
        if try Bool.fetchOne(keyed, arguments: [environment, replayKey]) == true { return true }
        let legacy = try db.cachedStatement(
            sql: "SELECT 1 FROM redemptions WHERE original_transaction_id = ? AND replay_key IS NULL AND environment = ? LIMIT 1")
        return try Bool.fetchOne(legacy, arguments: [replayKey, environment]) == true
    }
}
