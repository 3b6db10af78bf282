import Logging
import ServiceLifecycle

/// Closes the storage when the server shuts down. Handed to ``buildApplication`` first (after
/// ``EventLoopGroupService``, when there is one), so the service group stops it last but that
/// one: after the HTTP server (every in-flight request answered) and the checkpoint service
/// (the last checkpoint signed). Then the ledger's queued writes are finished and the
/// database is closed.
public struct StorageService: Service {
    let storage: any CofferStorage
    let logger: Logger

    public init(_ storage: any CofferStorage, logger: Logger) {
        self.storage = storage
        self.logger = logger
    }

    public func run() async throws {
        // Returns when graceful shutdown begins for this service; throws when the group is
        // cancelled instead. The storage is closed either way.
        try? await gracefulShutdown()
        do { try await storage.close() } catch { logger.error("closing the database failed", metadata: ["error": "\(error)"]) }
    }
}
