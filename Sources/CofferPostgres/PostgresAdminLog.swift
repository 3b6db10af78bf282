import CofferCore
import Foundation
import PostgresNIO

/// The admin audit log in PostgreSQL (`admin_actions`, append-only by trigger), chained in the
/// ledger's hash chain like redemptions and attempts.
public struct PostgresAdminLog: AdminLogRepository, CatalogueLogSource {
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

    public func catalogueLog(afterRow: Int64, limit: Int) async throws -> [LinkedEntry] {
        let actions = CatalogueLog.actions.map(\.rawValue)
        let genesis = Hex.encode(LedgerChain.genesis)
        return try await backend.read { c in
            try await c.rows(
                """
                SELECT a.sequence, a.at, a.key_id, a.key_name, a.action, a.target, a.detail, a.client_address,
                  e.sequence AS chained, e.entry_hash AS chained_hash, p.entry_hash AS previous_hash
                FROM admin_actions a
                JOIN ledger_events e ON e.kind = 'adminAction' AND e.row_sequence = a.sequence
                LEFT JOIN ledger_events p ON p.sequence = e.sequence - 1
                WHERE a.sequence > \(afterRow) AND a.action = ANY(\(actions))
                ORDER BY a.sequence LIMIT \(max(0, limit))
                """, logger: backend.logger
            ) { row in
                let chained = try row.value("chained", Int64.self)
                let previous = try row.value("previous_hash", String?.self)
                return LinkedEntry(
                    previousHash: chained == 1 ? genesis : previous ?? "",
                    chained: ChainedEntry(
                        entry: .adminAction(try AdminAction(row: row), sequence: chained), entryHash: try row.value("chained_hash")))
            }
        }
    }

    public func actions(after: Int64, limit: Int) async throws -> [AdminAction] {
        try await backend.read { c in
            try await c.rows(
                "SELECT \(unescaped: AdminAction.columns) FROM admin_actions WHERE sequence > \(after) ORDER BY sequence LIMIT \(max(0, limit))",
                logger: backend.logger, AdminAction.init(row:))
        }
    }
}
