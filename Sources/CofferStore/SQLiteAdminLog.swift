import CofferCore
import Foundation
import GRDB

/// The admin audit log in SQLite (`admin_actions`, append-only by trigger), chained in the
/// ledger's hash chain like redemptions and attempts.
public struct SQLiteAdminLog: AdminLogRepository, CatalogueLogSource {
    private let db: CofferDatabase
    private let checkpoints: CheckpointPolicy?

    /// `checkpoints` signs a checkpoint when an action lands on the policy's interval (the
    /// CLI, which may not hold the key, passes nil: the server's checkpoint service signs later).
    public init(_ db: CofferDatabase, checkpoints: CheckpointPolicy? = nil) {
        self.db = db
        self.checkpoints = checkpoints
    }

    public func record(_ a: AdminAction) async throws {
        try await db.pool.write { [checkpoints] db in try ChainStore.log(db, a, policy: checkpoints) }
    }

    public func catalogueLog(afterRow: Int64, limit: Int) async throws -> [LinkedEntry] {
        let actions = CatalogueLog.actions.map(\.rawValue)
        return try await db.pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT a.*, e.sequence AS chained, e.entry_hash AS chained_hash, p.entry_hash AS previous_hash
                    FROM admin_actions a
                    JOIN ledger_events e ON e.kind = 'adminAction' AND e.row_sequence = a.sequence
                    LEFT JOIN ledger_events p ON p.sequence = e.sequence - 1
                    WHERE a.sequence > ? AND a.action IN (\(actions.map { _ in "?" }.joined(separator: ", ")))
                    ORDER BY a.sequence LIMIT ?
                    """, arguments: StatementArguments([afterRow as any DatabaseValueConvertible] + actions + [max(0, limit)])
            ).map { row in
                let chained: Int64 = row["chained"]
                let previous: String? = row["previous_hash"]
                return LinkedEntry(
                    previousHash: chained == 1 ? Hex.encode(LedgerChain.genesis) : previous ?? "",
                    chained: ChainedEntry(
                        entry: .adminAction(try AdminActionRecord(row: row).adminAction, sequence: chained), entryHash: row["chained_hash"]))
            }
        }
    }

    public func actions(after: Int64, limit: Int) async throws -> [AdminAction] {
        try await db.pool.read { db in
            try AdminActionRecord.page(after: after, limit: max(0, limit)).fetchAll(db).map(\.adminAction)
        }
    }
}
