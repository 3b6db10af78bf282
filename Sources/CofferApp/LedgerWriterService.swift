import ServiceLifecycle

/// The ledger's group-commit writer as a service: at shutdown it stops taking writes and
/// finishes the queued ones, after the HTTP server stopped and before ``StorageService``
/// closes the database (the order ``buildApplication`` gives the service group).
public struct LedgerWriterService: Service {
    let storage: SQLiteStorage

    public init(_ storage: SQLiteStorage) { self.storage = storage }

    public func run() async throws {
        try? await gracefulShutdown()
        await storage.ledger.finishWrites()
    }
}
