import Logging
import NIOPosix
import ServiceLifecycle

/// Shuts down the HTTP event loops that `--event-loops` made (``CofferServer/CofferConfiguration/eventLoops``)
/// when the server shuts down. Handed to ``buildApplication`` first, so the service group
/// stops it last: after the HTTP server has closed its connections and every other service
/// has stopped.
struct EventLoopGroupService: Service {
    let group: MultiThreadedEventLoopGroup
    let logger: Logger

    init(_ group: MultiThreadedEventLoopGroup, logger: Logger) {
        self.group = group
        self.logger = logger
    }

    func run() async throws {
        // Returns when graceful shutdown begins for this service; throws when the group is
        // cancelled instead. The loops are shut down either way.
        try? await gracefulShutdown()
        do { try await group.shutdownGracefully() } catch {
            logger.error("shutting down the event loops failed", metadata: ["error": "\(error)"])
        }
    }
}
