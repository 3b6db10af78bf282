import CofferCore
import Foundation

extension SQLiteLedger: LedgerAuditRepository {
    public func chainedEntries(after: Int64, limit: Int) async throws -> [ChainedEntry] {
        try await events(after: after, limit: limit).map(\.chainedEntry)
    }

    public func sealedHead() async throws -> LedgerCheckpoint? {
        try await db.pool.read { db in try ChainStore.sealedHead(db) }
    }
}
