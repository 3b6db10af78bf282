import ServiceLifecycle

/// The ledger's group-commit writer as a service: at shutdown it stops taking writes and
/// finishes the queued ones, after the HTTP server stopped and before ``StorageService``
/// closes the database (the order ``buildApplication`` gives the service group).
public struct LedgerWriterService: Service {
    let storage: any CofferStorage

    public init(_ storage: any CofferStorage) { self.storage = storage }

    public func run() async throws {
        try? await gracefulShutdown()
        await storage.finishWrites()
    }
}
