/// An error of the storage engine itself (busy, I/O, disk full, connection lost): the server
/// answers 503 `storageUnavailable` with `Retry-After`, never a bare 500, and logs the details
/// without sending them. Each backend marks its engine's error types with this protocol, so
/// the HTTP layer classifies failures without depending on any backend.
public protocol StorageFailure: Error {}
