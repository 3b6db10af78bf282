import CofferCore

/// A stored ledger event, joined with the row it chains (nil when that row is gone).
public struct StoredEvent: Sendable, Hashable {
    public var sequence: Int64
    public var kind: LedgerEventKind
    public var row: Int64
    public var entryHash: String
    public var entry: LedgerEntry?

    /// The event as a chained entry; an entry whose row is gone has no values (its hash then
    /// fails verification, as it should).
    var chainedEntry: ChainedEntry {
        ChainedEntry(entry: entry ?? LedgerEntry(sequence: sequence, kind: kind, row: row, values: []), entryHash: entryHash)
    }
}
