import CofferCore
import Foundation

extension SQLiteLedger: LedgerAuditRepository, CatalogueLogSource {
    public func chainedEntries(after: Int64, limit: Int) async throws -> [ChainedEntry] {
        try await events(after: after, limit: limit).map(\.chainedEntry)
    }

    public func adminEvents(after: Int64, limit: Int) async throws -> [Int64] {
        try await db.pool.read { db in
            try Int64.fetchAll(
                db.cachedStatement(sql: "SELECT sequence FROM ledger_events WHERE kind = 'adminAction' AND sequence > ? ORDER BY sequence LIMIT ?"),
                arguments: [after, max(0, limit)])
        }
    }

    public func adminRows(after: Int64, limit: Int) async throws -> [Int64] {
        try await db.pool.read { db in
            try Int64.fetchAll(
                db.cachedStatement(sql: "SELECT sequence FROM admin_actions WHERE sequence > ? ORDER BY sequence LIMIT ?"),
                arguments: [after, max(0, limit)])
        }
    }

    public func eventCount(after: Int64, through: Int64) async throws -> Int64 {
        try await db.pool.read { db in
            try Int64.fetchOne(
                db.cachedStatement(sql: "SELECT count(*) FROM ledger_events WHERE sequence > ? AND sequence <= ?"), arguments: [after, through]) ?? 0
        }
    }

    public func sealedHead() async throws -> LedgerCheckpoint? {
        try await db.pool.read { db in try ChainStore.sealedHead(db) }
    }
}
