import CofferCore
import Foundation

extension InMemoryLedger: LedgerAuditRepository {
    public func chainedEntries(after: Int64, limit: Int) -> [ChainedEntry] { chain.entries(after: after, limit: limit) }

    public func checkpoints(after: Int64, limit: Int) -> [LedgerCheckpoint] { chain.checkpoints(after: after, limit: limit) }

    public func latestCheckpoint() -> LedgerCheckpoint? { chain.checkpoints.last }

    public func sealedHead() -> LedgerCheckpoint? { chain.seal }

    @discardableResult
    public func checkpointHead(now: Date) throws -> LedgerCheckpoint? { try chain.checkpointHead(now: now) }

    public func sealIntact() throws { try chain.checkSeal() }
}
