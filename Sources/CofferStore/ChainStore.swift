import CofferCore
import Foundation
import GRDB

/// The hash-chain writes and reads over `ledger_events` and `ledger_checkpoints`.
enum ChainStore {
    struct Head {
        var sequence: Int64
        var hash: [UInt8]
    }

    /// The chain's last event (the genesis hash at sequence 0 when empty). Read before every
    /// append: a cached statement and two columns decoded by hand, not a record.
    static func head(_ db: Database) throws -> Head {
        let statement = try db.cachedStatement(sql: "SELECT sequence, entry_hash FROM ledger_events ORDER BY sequence DESC LIMIT 1")
        guard let row = try Row.fetchOne(statement) else {
            return Head(sequence: 0, hash: LedgerChain.genesis)
        }
        let hex = try row.decode(String.self, forColumn: "entry_hash")
        guard let hash = Hex.decode(hex), hash.count == 32 else { throw StoreError.invalidValue(column: "entry_hash", value: hex) }
        return Head(sequence: try row.decode(Int64.self, forColumn: "sequence"), hash: hash)
    }

    /// Appends the event for a row just inserted, in the caller's transaction; signs a
    /// checkpoint when the policy says so.
    ///
    /// The event is inserted with a cached statement, not a ``LedgerEventRecord``: this runs for
    /// every redemption and attempt, and a record insert builds its SQL and encodes the record
    /// each time (generating and preparing SQL per row was ~5% of the server's CPU under load).
    static func append(_ db: Database, policy: CheckpointPolicy?, now: Date, entry: (Int64) -> LedgerEntry) throws {
        let head = try head(db)
        let event = entry(head.sequence + 1)
        // SQLite's C string readers stop at U+0000: a value holding one would be hashed whole
        // and read back cut, and the chain could never verify again. The vault never lets one
        // through (LedgerText); this is the last line.
        for value in event.values {
            if let value, value.utf8.contains(0) {
                throw StoreError.invalidValue(column: event.kind.rawValue, value: "a value holding U+0000")
            }
        }
        let hash = LedgerChain.hash(previous: head.hash, entry: event).hexString
        try db.cachedStatement(sql: "INSERT INTO ledger_events (sequence, kind, row_sequence, entry_hash) VALUES (?, ?, ?, ?)")
            .execute(arguments: [event.sequence, event.kind.rawValue, event.row, hash])
        if let policy, event.sequence % policy.every == 0 {
            try insert(db, try policy.signer.checkpoint(sequence: event.sequence, entryHash: hash, time: Int64(now.timeIntervalSince1970)))
        }
    }

    static func insert(_ db: Database, _ checkpoint: LedgerCheckpoint) throws {
        try CheckpointRecord(checkpoint).insert(db)
    }

    static func checkpoints(_ db: Database, after: Int64, limit: Int) throws -> [LedgerCheckpoint] {
        try CheckpointRecord.page(after: after, limit: limit).fetchAll(db).map(\.checkpoint)
    }

    static func latestCheckpoint(_ db: Database) throws -> LedgerCheckpoint? {
        try CheckpointRecord.order(CheckpointRecord.sequenceColumn.desc).fetchOne(db)?.checkpoint
    }

    /// Appends an admin action and its chain event, in the caller's transaction.
    @discardableResult
    static func insert(_ db: Database, _ action: AdminAction, policy: CheckpointPolicy?) throws -> AdminAction {
        var record = AdminActionRecord(action)
        try record.insert(db)
        let stored = record.adminAction
        try append(db, policy: policy, now: action.at) { .adminAction(stored, sequence: $0) }
        return stored
    }

    /// Records an admin change's entry (escaped for the ledger) in the admin log, chained and
    /// sealed, in the caller's transaction — the change's own. Nothing without an entry.
    static func log(_ db: Database, _ action: AdminAction?, policy: CheckpointPolicy?) throws {
        guard let action else { return }
        let stored = AdminAction.escapedForLedger(action)
        try sealed(db, policy: policy, now: stored.at) { _ = try insert(db, stored, policy: policy) }
    }

    /// Inserts a revocation (no chain event: the caller appends it) and returns it with its sequence.
    static func insert(_ db: Database, _ revocation: Revocation) throws -> Revocation {
        var record = RevocationRecord(revocation)
        try record.insert(db)
        return try record.revocation()
    }

    /// Appends a purchase event and its chain event, in the caller's transaction.
    static func insert(_ db: Database, _ event: PurchaseEvent, policy: CheckpointPolicy?) throws -> PurchaseEvent {
        var record = PurchaseEventRecord(event)
        try record.insert(db)
        let stored = try record.event()
        try append(db, policy: policy, now: event.at) { .purchaseEvent(stored, sequence: $0) }
        return stored
    }

    /// Rows of the chained tables that no event chains, oldest first (at most `limit`).
    static func unchainedRows(_ db: Database, limit: Int) throws -> [(kind: LedgerEventKind, row: Int64, at: Double)] {
        let rows = try Row.fetchAll(
            db,
            sql: """
                SELECT 'redemption' AS kind, sequence, redeemed_at AS at FROM redemptions r
                  WHERE NOT EXISTS (SELECT 1 FROM ledger_events e WHERE e.sequence > 0 AND e.kind = 'redemption' AND e.row_sequence = r.sequence)
                UNION ALL
                SELECT 'attempt', sequence, at FROM attempts a
                  WHERE NOT EXISTS (SELECT 1 FROM ledger_events e WHERE e.sequence > 0 AND e.kind = 'attempt' AND e.row_sequence = a.sequence)
                UNION ALL
                SELECT 'revocation', sequence, recorded_at FROM revocations v
                  WHERE NOT EXISTS (SELECT 1 FROM ledger_events e WHERE e.sequence > 0 AND e.kind = 'revocation' AND e.row_sequence = v.sequence)
                UNION ALL
                SELECT 'adminAction', sequence, at FROM admin_actions m
                  WHERE NOT EXISTS (SELECT 1 FROM ledger_events e WHERE e.sequence > 0 AND e.kind = 'adminAction' AND e.row_sequence = m.sequence)
                UNION ALL
                SELECT 'purchaseEvent', sequence, at FROM purchase_events p
                  WHERE NOT EXISTS (SELECT 1 FROM ledger_events e WHERE e.sequence > 0 AND e.kind = 'purchaseEvent' AND e.row_sequence = p.sequence)
                ORDER BY at, kind, sequence LIMIT ?
                """, arguments: [limit])
        return try rows.compactMap { row in
            guard let kind = LedgerEventKind(rawValue: try row.decode(String.self, forColumn: "kind")) else { return nil }
            return (kind: kind, row: try row.decode(Int64.self, forColumn: "sequence"), at: try row.decode(Double.self, forColumn: "at"))
        }
    }
}
