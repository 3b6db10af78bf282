/// An error of the storage engine itself (busy, I/O, disk full, connection lost): the server
/// answers 503 `storageUnavailable` with `Retry-After`, never a bare 500, and logs the details
/// without sending them. Each backend marks its engine's error types with this protocol, so
/// the HTTP layer classifies failures without depending on any backend.
public protocol StorageFailure: Error {}

/// A ledger write whose outcome could not be known: the database may have committed it (the
/// answer was lost after the COMMIT, and asking again failed — the server stopped, or stayed
/// unreachable). Answered 503 like any storage failure; the vault keeps what it answered in
/// doubt (``InDoubtRedemptions``) so that, if it did commit, the purchase's retry gets it
/// instead of a 409.
public struct LedgerWriteInDoubt: StorageFailure, Sendable, CustomStringConvertible {
    /// Why the write was not answered.
    public var underlying: String
    /// The redemptions the write would have inserted (not those it refused).
    public var redemptionIds: Set<String>

    public init(_ underlying: any Error, redemptionIds: Set<String>) {
        self.underlying = "\(underlying)"
        self.redemptionIds = redemptionIds
    }

    public var description: String { "the ledger write's outcome is not known (\(underlying)): it may have committed" }
}
