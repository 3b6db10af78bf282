/// A write refused because the chain does not end where this server's key last sealed it.
public enum LedgerIntegrityError: Error, Sendable, CustomStringConvertible {
    /// A chain without a seal whose head no checkpoint of this key covers (a database from
    /// before the seal that was not shut down cleanly, or entries appended since).
    case unsealed(head: Int64)
    /// The chain ends elsewhere than the seal: entries appended, removed or rewritten.
    case sealMismatch(sealed: Int64, actual: Int64)
    /// The seal is not signed by this server's key.
    case sealNotSigned(keyId: String)

    public var description: String {
        switch self {
        case .unsealed(let head):
            "the ledger's head (entry \(head)) is covered by no seal or checkpoint of this server's key"
        case .sealMismatch(let sealed, let actual) where actual > sealed:
            "entries \(sealed + 1)–\(actual) were appended after the server last sealed the ledger at \(sealed): not by this server"
        case .sealMismatch(let sealed, let actual):
            "the ledger ends at \(actual) but the server sealed it at \(sealed): entries were removed or rewritten"
        case .sealNotSigned(let keyId):
            "the ledger's seal is not signed by this server's key \(keyId)"
        }
    }
}

/// A write the seal refuses is a storage failure: 503 `storageUnavailable` with `Retry-After`,
/// the seal's state in the log (the operator must act; the client learns only that it failed).
extension LedgerIntegrityError: StorageFailure {}
