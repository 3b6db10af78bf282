import Foundation

/// The furthest a data directory's instances saw the ledger sealed: a sequence and its entry
/// hash, kept in the data directory (`DATA/ledger-high-water.json`), outside the database.
///
/// The seal lives in the database, so a database put back to an older state — an old backup,
/// a failover to a standby that lost commits, an insider restoring a copy — carries an older
/// chain and a seal that agree with each other, and the seal alone cannot tell. Whatever
/// happens to the database, this mark does not go back: a ledger that ends before it, or holds
/// another entry at its sequence, is refused at start (``problem(hashThere:)``).
public struct LedgerHighWater: Codable, Sendable, Hashable {
    public var sequence: Int64
    /// Lower-case hex SHA-256 of the entry at ``sequence``.
    public var entryHash: String
    /// Unix seconds: when an instance last raised the mark.
    public var seenAt: Int64

    public init(sequence: Int64, entryHash: String, seenAt: Int64) {
        self.sequence = sequence
        self.entryHash = entryHash
        self.seenAt = seenAt
    }

    /// What is wrong with a ledger whose entry at ``sequence`` has the hash `hashThere` (nil:
    /// the ledger has no entry there, it ends before it); nil when it is the entry seen.
    public func problem(hashThere: String?) -> String? {
        let seen = "entry \(sequence), which this data directory saw sealed (by \(RFC3339.format(Date(timeIntervalSince1970: Double(seenAt)))))"
        guard let hashThere else { return "the ledger ends before \(seen): it was rolled back" }
        guard hashThere == entryHash else {
            return "the ledger holds another \(seen) (hash \(hashThere.prefix(16))…, not \(entryHash.prefix(16))…): it was rewritten"
        }
        return nil
    }

    /// Whether `seal` raises the mark (a later sequence than the mark's, or no mark yet).
    public static func raises(_ seal: LedgerCheckpoint, over mark: LedgerHighWater?) -> Bool {
        seal.sequence > (mark?.sequence ?? 0)
    }
}
