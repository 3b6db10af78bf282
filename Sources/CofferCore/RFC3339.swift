import Foundation

/// A hand-written RFC 3339 parser: Foundation's `ISO8601DateFormatter` costs ~70 µs a date
/// on Linux, which dominated receipt decoding in the peers we measured.
///
/// Accepts `YYYY-MM-DDTHH:MM:SS`, optional fraction, then `Z`, `±HH:MM` or `±HHMM`
/// (Xcode receipts write `+0300`). Years 0001–9999.
public enum RFC3339 {
    public static func parse<S: StringProtocol>(_ text: S) -> Date? {
        parse(bytes: Array(text.utf8)[...])
    }

    /// Parses UTF-8 bytes (no String needed). Written as one index-based scan: closures
    /// capturing a mutable cursor cost dynamic exclusivity checks on every character.
    public static func parse(bytes: ArraySlice<UInt8>) -> Date? {
        var i = bytes.startIndex
        let end = bytes.endIndex

        @inline(__always) func digits(_ i: inout Int, _ count: Int, _ bytes: ArraySlice<UInt8>, _ end: Int) -> Int? {
            guard end - i >= count else { return nil }
            var value = 0
            for _ in 0..<count {
                let c = bytes[i]
                guard c >= 0x30, c <= 0x39 else { return nil }
                value = value * 10 + Int(c &- 0x30)
                i += 1
            }
            return value
        }
        @inline(__always) func skip(_ i: inout Int, _ c: UInt8, _ bytes: ArraySlice<UInt8>, _ end: Int) -> Bool {
            guard i < end, bytes[i] == c else { return false }
            i += 1
            return true
        }

        guard let year = digits(&i, 4, bytes, end), skip(&i, 0x2D, bytes, end), let month = digits(&i, 2, bytes, end),
            skip(&i, 0x2D, bytes, end), let day = digits(&i, 2, bytes, end)
        else { return nil }
        guard skip(&i, 0x54, bytes, end) || skip(&i, 0x74, bytes, end) || skip(&i, 0x20, bytes, end) else { return nil }
        guard let hour = digits(&i, 2, bytes, end), skip(&i, 0x3A, bytes, end), let minute = digits(&i, 2, bytes, end),
            skip(&i, 0x3A, bytes, end), let second = digits(&i, 2, bytes, end)
        else { return nil }
        guard (1...12).contains(month), day >= 1, day <= daysIn(month: month, year: year), hour < 24, minute < 60, second < 61 else {
            return nil
        }
        var fraction = 0.0
        if skip(&i, 0x2E, bytes, end) {
            var scale = 0.1
            var count = 0
            while i < end, bytes[i] >= 0x30, bytes[i] <= 0x39 {
                fraction += Double(bytes[i] &- 0x30) * scale
                scale /= 10
                count += 1
                i += 1
                guard count <= 9 else { return nil }
            }
            guard count > 0 else { return nil }
        }
        var offset = 0
        if skip(&i, 0x5A, bytes, end) || skip(&i, 0x7A, bytes, end) {
            offset = 0
        } else if i < end, bytes[i] == 0x2B || bytes[i] == 0x2D {
            let negative = bytes[i] == 0x2D
            i += 1
            guard let oh = digits(&i, 2, bytes, end) else { return nil }
            _ = skip(&i, 0x3A, bytes, end)
            guard let om = digits(&i, 2, bytes, end), oh < 24, om < 60 else { return nil }
            offset = (oh * 3600 + om * 60) * (negative ? -1 : 1)
        } else {
            return nil
        }
        guard i == end else { return nil }
        let days = daysFromCivil(year: year, month: month, day: day)
        let seconds = Double(days * 86400 + hour * 3600 + minute * 60 + second - offset) + fraction
        return Date(timeIntervalSince1970: seconds)
    }

    /// Formats a date as `2024-02-23T17:27:16Z` (UTC, whole seconds).
    public static func format(_ date: Date) -> String {
        let total = Int(floor(date.timeIntervalSince1970))
        let days = total >= 0 ? total / 86400 : (total - 86399) / 86400
        let secs = total - days * 86400
        let (y, m, d) = civilFromDays(days)
        func pad(_ v: Int, _ w: Int) -> String {
            let s = String(v)
            return s.count >= w ? s : String(repeating: "0", count: w - s.count) + s
        }
        return "\(pad(y, 4))-\(pad(m, 2))-\(pad(d, 2))T\(pad(secs / 3600, 2)):\(pad(secs / 60 % 60, 2)):\(pad(secs % 60, 2))Z"
    }

    static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    /// Days since 1970-01-01 (Howard Hinnant's algorithm).
    static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146097 + doe - 719468
    }

    static func civilFromDays(_ z0: Int) -> (Int, Int, Int) {
        let z = z0 + 719468
        let era = (z >= 0 ? z : z - 146096) / 146097
        let doe = z - era * 146097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365
        let y = yoe + era * 400
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (m <= 2 ? y + 1 : y, m, d)
    }
}
