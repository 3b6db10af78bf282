/// The storage could not be opened (``openStorage(_:logger:)`` failed): `coffer` prints the
/// description, which names the data directory or the database (password redacted) and the
/// cause, and exits with status 2.
public struct StorageOpenError: Error, CustomStringConvertible {
    /// What could not be opened: "data directory D" or "database postgres://…".
    public var what: String
    public var underlying: any Error

    public var description: String { "cannot open \(what): \(underlying)" }
}
