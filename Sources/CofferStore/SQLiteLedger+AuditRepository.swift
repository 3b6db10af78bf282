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

    public func sealedHead() async throws -> LedgerCheckpoint? {
        try await db.pool.read { db in try ChainStore.sealedHead(db) }
    }
}
