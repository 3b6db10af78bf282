import CofferCore

/// Errors raised by the SQLite store itself (SQLite errors propagate as GRDB `DatabaseError`).
public enum StoreError: Error, Sendable, Hashable {
    /// The database records migrations this binary does not know: it was migrated by a newer build.
    case unknownMigrations([String])
    /// A stored value could not be mapped back to the model (e.g. an unknown enum raw value).
    case invalidValue(column: String, value: String)
    /// Opened read-only, the database lacks migrations this binary expects (run `coffer migrate`).
    case schemaOutdated(missing: [String])
    /// The ledger's writer has finished (the server is shutting down): nothing more is written.
    case closed
}

extension StoreError: CustomStringConvertible {
    public var description: String {
        switch self {
        case .unknownMigrations(let names): "the database was migrated by a newer Coffer (\(names.joined(separator: ", ")))"
        case .invalidValue(let column, let value): "unexpected value in \(column): \(value.prefix(80))"
        case .schemaOutdated(let missing): "the database lacks migration(s) \(missing.joined(separator: ", ")): run coffer migrate first"
        case .closed: "the ledger's writer has finished: the server is shutting down"
        }
    }
}

/// A write refused because the server is shutting down is a storage failure (503, retry).
extension StoreError: StorageFailure {}
