/// A stored ledger event, joined with the row it chains (nil when that row is gone).
public struct StoredEvent: Sendable, Hashable {
    public var sequence: Int64
    public var kind: LedgerEventKind
    public var row: Int64
    public var entryHash: String
    public var entry: LedgerEntry?

    public init(sequence: Int64, kind: LedgerEventKind, row: Int64, entryHash: String, entry: LedgerEntry?) {
        self.sequence = sequence
        self.kind = kind
        self.row = row
        self.entryHash = entryHash
        self.entry = entry
    }

    /// The event as a chained entry; an entry whose row is gone has no values (its hash then
    /// fails verification, as it should).
    public var chainedEntry: ChainedEntry {
        ChainedEntry(entry: entry ?? LedgerEntry(sequence: sequence, kind: kind, row: row, values: []), entryHash: entryHash)
    }
}
