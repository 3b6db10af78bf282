import CofferCore
import Foundation
import PostgresNIO

/// The admin audit log in PostgreSQL (`admin_actions`, append-only by trigger), chained in the
/// ledger's hash chain like redemptions and attempts.
public struct PostgresAdminLog: AdminLogRepository {
    private let backend: PostgresBackend
    private let checkpoints: CheckpointPolicy?

    public init(_ backend: PostgresBackend, checkpoints: CheckpointPolicy? = nil) {
        self.backend = backend
        self.checkpoints = checkpoints
    }

    public func record(_ a: AdminAction) async throws {
        let logger = backend.logger
        try await backend.transaction { [checkpoints] c in try await PostgresChain.log(c, a, policy: checkpoints, logger: logger) }
    }

    public func actions(after: Int64, limit: Int) async throws -> [AdminAction] {
        try await backend.read { c in
            try await c.rows(
                "SELECT \(unescaped: AdminAction.columns) FROM admin_actions WHERE sequence > \(after) ORDER BY sequence LIMIT \(max(0, limit))",
                logger: backend.logger, AdminAction.init(row:))
        }
    }
}
