import CofferCore
import Foundation
import GRDB

/// The admin audit log in SQLite (`admin_actions`, append-only by trigger), chained in the
/// ledger's hash chain like redemptions and attempts.
public struct SQLiteAdminLog: AdminLogRepository {
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

    public func actions(after: Int64, limit: Int) async throws -> [AdminAction] {
        try await db.pool.read { db in
            try AdminActionRecord.page(after: after, limit: max(0, limit)).fetchAll(db).map(\.adminAction)
        }
    }
}
