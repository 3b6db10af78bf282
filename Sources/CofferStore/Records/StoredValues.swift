import CofferCore
import Foundation
import GRDB

// How the hand-mapped records (redemptions and attempts: see ``RedemptionRecord``) store their
// values, as ``CodableRecord`` does: dates are REAL unix seconds, as every migration says; an
// enum is its raw value.

extension Date {
    /// The stored representation: unix seconds.
    var unixSeconds: Double { timeIntervalSince1970 }
}

extension Row {
    /// Decodes a non-null REAL unix-seconds column.
    func date(_ column: Column) throws -> Date {
        try Self.date(column, try decode(Double.self, forColumn: column))
    }

    /// Decodes a nullable REAL unix-seconds column.
    func optionalDate(_ column: Column) throws -> Date? {
        try decode(Double?.self, forColumn: column).map { try Self.date(column, $0) }
    }

    /// A stored time, refused when out of range (infinite, ±10¹² s: written behind the
    /// server's back) as an invalid value, never a trap further on.
    private static func date(_ column: Column, _ seconds: Double) throws -> Date {
        guard let date = LedgerEntry.storedDate(seconds: seconds) else { throw StoreError.invalidValue(column: column.name, value: "\(seconds)") }
        return date
    }

    /// Decodes a TEXT column holding the raw value of `T`.
    func enumValue<T: RawRepresentable>(_ type: T.Type, _ column: Column) throws -> T where T.RawValue == String {
        let raw = try decode(String.self, forColumn: column)
        guard let value = T(rawValue: raw) else { throw StoreError.invalidValue(column: column.name, value: raw) }
        return value
    }
}
