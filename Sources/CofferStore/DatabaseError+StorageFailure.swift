import CofferCore
import GRDB

/// SQLite's errors (busy, I/O, disk full, …) are storage failures: 503 `storageUnavailable`.
extension DatabaseError: StorageFailure {}
