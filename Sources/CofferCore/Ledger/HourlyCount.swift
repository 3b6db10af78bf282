import Foundation

/// Redemptions and refused attempts in one UTC hour: what the console charts.
public struct HourlyCount: Codable, Sendable, Hashable {
    /// The hour's start.
    public var hour: Date
    public var redemptions: Int
    public var refused: Int

    public init(hour: Date, redemptions: Int, refused: Int) {
        self.hour = hour
        self.redemptions = redemptions
        self.refused = refused
    }

    /// The hour (seconds since 1970 / 3600, rounded down) of an instant.
    public static func hourNumber(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 / 3600).rounded(.down)) }

    /// Per-hour counts from (hour number, count) pairs of each kind: only hours with activity,
    /// oldest first.
    public static func merge(redemptions: [(Int64, Int)], refused: [(Int64, Int)]) -> [HourlyCount] {
        var hours: [Int64: (redemptions: Int, refused: Int)] = [:]
        for (hour, n) in redemptions { hours[hour, default: (0, 0)].redemptions += n }
        for (hour, n) in refused { hours[hour, default: (0, 0)].refused += n }
        return hours.sorted { $0.key < $1.key }.map {
            HourlyCount(hour: Date(timeIntervalSince1970: Double($0.key) * 3600), redemptions: $0.value.redemptions, refused: $0.value.refused)
        }
    }
}
