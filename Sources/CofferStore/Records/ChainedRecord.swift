import GRDB

/// The Codable records of the chain's tables (revocations, admin actions, ledger events and
/// checkpoints): columns are the snake_case of the properties, and dates are REAL unix seconds
/// (`timeIntervalSince1970`), exactly as the hand-written mapping stored them before — the
/// chain hashes what is read back, so neither may change.
///
/// Mutable-persistable: the rows SQLite numbers (AUTOINCREMENT) take their sequence in
/// `didInsert`.
protocol ChainedRecord: Codable, FetchableRecord, MutablePersistableRecord {}

extension ChainedRecord {
    static var databaseColumnDecodingStrategy: DatabaseColumnDecodingStrategy { .convertFromSnakeCase }
    static var databaseColumnEncodingStrategy: DatabaseColumnEncodingStrategy { .convertToSnakeCase }
    static func databaseDateDecodingStrategy(for column: String) -> DatabaseDateDecodingStrategy { .timeIntervalSince1970 }
    static func databaseDateEncodingStrategy(for column: String) -> DatabaseDateEncodingStrategy { .timeIntervalSince1970 }
}

extension ChainedRecord {
    /// Every chained table is numbered by `sequence`.
    static var sequenceColumn: Column { Column("sequence") }

    /// Rows with `sequence > after`, in order, at most `limit` (a negative `limit`: all, as in SQLite).
    static func page(after: Int64, limit: Int) -> QueryInterfaceRequest<Self> {
        filter(sequenceColumn > after).order(sequenceColumn).limit(limit)
    }
}
