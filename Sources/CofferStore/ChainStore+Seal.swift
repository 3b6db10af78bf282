import CofferCore
import Foundation
import GRDB

// The seal: the chain's head as last signed by the server's key (`ledger_head`, one row),
// checked before and rewritten after every transaction that appends.
extension ChainStore {
    static func sealedHead(_ db: Database) throws -> LedgerCheckpoint? {
        try CheckpointRecord.fetchOne(db.cachedStatement(sql: "SELECT * FROM ledger_head WHERE id = 1"))?.checkpoint
    }

    /// Throws unless the chain ends exactly where the seal says, under `policy`'s key (the
    /// rules: ``CofferCore/CheckpointPolicy/verifySeal(_:headSequence:headHash:covering:)``).
    static func checkSeal(_ db: Database, policy: CheckpointPolicy) throws {
        let head = try head(db)
        let sealed = try sealedHead(db)
        let covering = sealed == nil && head.sequence > 0 ? try CheckpointRecord.fetchOne(db, key: head.sequence)?.checkpoint : nil
        try policy.verifySeal(sealed, headSequence: head.sequence, headHash: head.hash.hexString, covering: covering)
    }

    /// Signs the chain's current head and stores it as the seal (one row, rewritten).
    ///
    /// A cached statement rather than a record's upsert: this runs once per write transaction
    /// (once per redemption when the server is not busy), and GRDB's upsert builds its SQL and
    /// reads back a RETURNING clause each time.
    static func seal(_ db: Database, policy: CheckpointPolicy, now: Date) throws {
        let head = try head(db)
        guard head.sequence > 0 else { return }
        let sealed = try policy.seal(headSequence: head.sequence, headHash: head.hash.hexString, now: now)
        try db.cachedStatement(
            sql: """
                INSERT INTO ledger_head (id, sequence, entry_hash, time, key_id, signature) VALUES (1, ?, ?, ?, ?, ?)
                ON CONFLICT (id) DO UPDATE SET sequence = excluded.sequence, entry_hash = excluded.entry_hash, time = excluded.time,
                  key_id = excluded.key_id, signature = excluded.signature
                """
        ).execute(arguments: [sealed.sequence, sealed.entryHash, sealed.time, sealed.keyId, sealed.signature])
    }

    /// Runs `body`, which appends, between a seal check and a new seal, in the caller's
    /// transaction. Without a policy (tools that hold no key) it only runs `body`.
    static func sealed<T>(_ db: Database, policy: CheckpointPolicy?, now: Date, _ body: () throws -> T) throws -> T {
        guard let policy else { return try body() }
        try checkSeal(db, policy: policy)
        let result = try body()
        try seal(db, policy: policy, now: now)
        return result
    }
}
