import GRDB

/// The records of the chain's tables (revocations, admin actions, ledger events and
/// checkpoints), each numbered by `sequence`.
protocol ChainedRecord: CodableRecord {}

extension ChainedRecord {
    /// Every chained table is numbered by `sequence`.
    static var sequenceColumn: Column { Column("sequence") }

    /// Rows with `sequence > after`, in order, at most `limit` (a negative `limit`: all, as in SQLite).
    static func page(after: Int64, limit: Int) -> QueryInterfaceRequest<Self> {
        filter(sequenceColumn > after).order(sequenceColumn).limit(limit)
    }
}
