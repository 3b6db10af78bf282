/// The data directory could not be opened (``SQLiteStorage/open(_:logger:)`` failed): `coffer`
/// prints the description, which names the directory and the cause, and exits with status 2.
public struct StorageOpenError: Error, CustomStringConvertible {
    public var dataDirectory: String
    public var underlying: any Error

    public var description: String { "cannot open data directory \(dataDirectory): \(underlying)" }
}
