import CofferCore
import GRDB

/// A record whose row mapping GRDB derives from `Codable`. Its `CodingKeys` name the columns
/// (the snake_case of the properties) and double as its `Columns`; dates are REAL unix seconds
/// (`timeIntervalSince1970`), exactly as the hand-written mappings stored them before and as
/// every migration declares them. The chain hashes what is read back, so neither may change.
///
/// The column names are spelled out, not derived by GRDB's `convertFromSnakeCase` /
/// `convertToSnakeCase` strategies: those convert every column name of every row read or
/// written (GRDB 7.10, release build, 17-column row: 17 µs to decode and 26 µs to insert, against
/// 2.5 and 9.5 µs with explicit keys), and the seal is read in every write transaction and every
/// event in every audit.
///
/// An enum is kept as its raw `String` and converted by the record, so that an unknown stored
/// value is a ``StoreError/invalidValue(column:value:)`` (a storage failure), as before, and
/// never a `DecodingError`.
///
/// Mutable-persistable: the rows SQLite numbers (AUTOINCREMENT) take their sequence in
/// `didInsert`; the others also conform to `PersistableRecord`.
protocol CodableRecord: Codable, FetchableRecord, MutablePersistableRecord {}

extension CodableRecord {
    /// Unix seconds, refused (a decoding error, a storage failure) when out of the range
    /// Coffer writes (``LedgerEntry/storedDate(seconds:)``): a row written behind the server's
    /// back, never a trap further on.
    static func databaseDateDecodingStrategy(for column: String) -> DatabaseDateDecodingStrategy {
        .custom { Double.fromDatabaseValue($0).flatMap(LedgerEntry.storedDate(seconds:)) }
    }
    static func databaseDateEncodingStrategy(for column: String) -> DatabaseDateEncodingStrategy { .timeIntervalSince1970 }
}
