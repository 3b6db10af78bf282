import Crypto
import Foundation

/// The tamper-evident side of the ledger: the hash chain every ledger write appends to, the
/// signed checkpoints over it, and the seal (the server's signature over the head it last
/// wrote). Auditors read it through the HTTP API; the server signs a checkpoint now and then.
public protocol LedgerAuditRepository: Sendable {
    /// Chained entries after `after`, in order, at most `limit`. An entry whose row is gone is
    /// returned with no values (its hash then fails verification, as it should).
    func chainedEntries(after: Int64, limit: Int) async throws -> [ChainedEntry]
    /// Signed checkpoints after `after`, in order, at most `limit`.
    func checkpoints(after: Int64, limit: Int) async throws -> [LedgerCheckpoint]
    func latestCheckpoint() async throws -> LedgerCheckpoint?
    /// The seal, when the chain has one: a checkpoint of the head as the server last wrote it.
    func sealedHead() async throws -> LedgerCheckpoint?
    /// Signs the chain's head now unless a checkpoint already covers it; returns the new
    /// checkpoint, if one was made. Never signs over entries the server did not seal.
    @discardableResult
    func checkpointHead(now: Date) async throws -> LedgerCheckpoint?
    /// Throws when the chain does not end where this server's key sealed it (read-only:
    /// readiness probes call it).
    func sealIntact() async throws
}

extension LedgerAuditRepository {
    /// Writes the chained export (``LedgerExport``) in chunks: header, the entries up to the
    /// seal, read first (entries appended meanwhile wait for the next export: an export ends at
    /// a signature, and ``LedgerExport/verify(_:publicKey:pinned:)`` refuses entries after its
    /// last one; without a seal, every entry), the checkpoints up to the last entry written,
    /// then the seal. A seal beyond the entries found is written too: the cut shows
    /// (`truncated`) instead of being hidden.
    public func export(publicKey: Curve25519.Signing.PublicKey?, now: Date, write: (String) async throws -> Void) async throws {
        try await write(try LedgerExport.headerLine(publicKey: publicKey, exportedAt: now))
        let seal = try await sealedHead()
        let through = seal?.sequence ?? .max
        let page = 500
        var after: Int64 = 0
        while after < through {
            let read = try await chainedEntries(after: after, limit: page)
            let entries = read.prefix { $0.entry.sequence <= through }
            let out = try entries.map(LedgerExport.entryLine).joined()
            if !out.isEmpty { try await write(out) }
            guard let last = entries.last else { break }
            after = last.entry.sequence
            if read.count < page { break }
        }
        var cursor: Int64 = 0
        var written: Set<Int64> = []
        while true {
            let checkpoints = try await checkpoints(after: cursor, limit: page)
            let covered = checkpoints.filter { $0.sequence <= after }
            if !covered.isEmpty { try await write(try covered.map(LedgerExport.checkpointLine).joined()) }
            written.formUnion(covered.map(\.sequence))
            guard let last = checkpoints.last, checkpoints.count == page, covered.count == checkpoints.count else { break }
            cursor = last.sequence
        }
        // The seal signs the head: one more checkpoint.
        if let seal, !written.contains(seal.sequence) {
            try await write(try LedgerExport.checkpointLine(seal))
        }
    }
}
