import CofferCore
import GRDB

/// A row of `ledger_events` (migrations 0002 and 0003): one link of the hash chain.
///
/// Only read through Codable: ``ChainStore/append(_:policy:now:entry:)`` inserts with its own
/// cached statement, on the hot path of every redemption (building the INSERT's SQL and
/// encoding a record for each row would cost what the cached statement saves).
struct LedgerEventRecord: ChainedRecord, Sendable {
    static let databaseTableName = "ledger_events"

    /// The columns: the properties' coding keys.
    enum CodingKeys: String, CodingKey, ColumnExpression {
        case sequence, kind, rowSequence = "row_sequence", entryHash = "entry_hash"
    }

    var sequence: Int64
    /// The raw ``LedgerEventKind``: an unknown value is a ``StoreError/invalidValue(column:value:)``.
    var kind: String
    var rowSequence: Int64
    var entryHash: String

    /// The event, not yet joined with its row.
    func storedEvent() throws -> StoredEvent {
        guard let kind = LedgerEventKind(rawValue: kind) else { throw StoreError.invalidValue(column: CodingKeys.kind.name, value: kind) }
        return StoredEvent(sequence: sequence, kind: kind, row: rowSequence, entryHash: entryHash, entry: nil)
    }
}
