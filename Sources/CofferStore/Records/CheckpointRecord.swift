import CofferCore
import GRDB

/// A row of `ledger_checkpoints` (migration 0002); it also reads the seal, the one row of
/// `ledger_head` (migration 0003), whose other column, `id`, is always 1.
struct CheckpointRecord: ChainedRecord, PersistableRecord, Sendable {
    static let databaseTableName = "ledger_checkpoints"

    /// The columns: the properties' coding keys.
    enum CodingKeys: String, CodingKey, ColumnExpression {
        case sequence, entryHash = "entry_hash", time, keyId = "key_id", signature
    }

    var sequence: Int64
    var entryHash: String
    /// Unix seconds (INTEGER).
    var time: Int64
    var keyId: String
    var signature: String

    init(_ checkpoint: LedgerCheckpoint) {
        sequence = checkpoint.sequence
        entryHash = checkpoint.entryHash
        time = checkpoint.time
        keyId = checkpoint.keyId
        signature = checkpoint.signature
    }

    /// The stored checkpoint.
    var checkpoint: LedgerCheckpoint {
        LedgerCheckpoint(sequence: sequence, entryHash: entryHash, time: time, keyId: keyId, signature: signature)
    }
}
