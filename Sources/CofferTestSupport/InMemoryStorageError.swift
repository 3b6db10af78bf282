/// What the in-memory repositories refuse, where the SQLite schema would refuse it too.
public enum InMemoryStorageError: Error, Sendable, Hashable {
    /// A second row with a value that must be unique (a redemption id, a grant hash, a key id
    /// or secret hash): a UNIQUE constraint in SQLite.
    case duplicate(String)
    /// A value the ledger cannot store as hashed (one holding U+0000).
    case invalidValue(String)
    /// The chain does not end where the seal says.
    case sealBroken
    /// The admin log cannot be written (``InMemoryLedger/failAdminLogWrites(_:)``), or a
    /// change asked to be logged where no admin log was given.
    case adminLogUnavailable
}
