import CofferCore
import GRDB

/// SQLite's errors (busy, I/O, disk full, …) are storage failures: 503 `storageUnavailable`.
extension DatabaseError: StorageFailure {}

/// A stored row that does not map back to its record (a time outside the range Coffer writes,
/// a value of the wrong type: written behind the server's back) is a storage failure too —
/// 503 and the log, never a 500.
extension RowDecodingError: StorageFailure {}
