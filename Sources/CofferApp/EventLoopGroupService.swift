import Hummingbird
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle

/// Shuts down the HTTP event loops that `--event-loops` made (``CofferServer/CofferConfiguration/eventLoops``)
/// when the server shuts down gracefully. Handed to ``buildApplication`` first, so the service
/// group stops it last: after the HTTP server has closed its connections and every other
/// service has stopped.
///
/// When the group is cancelled instead (a service failed, or the task running the application
/// was), every service is cancelled at once and the server may still be closing channels on
/// these loops: the loops are left running, for ``shutDownEventLoops(of:logger:)`` once the
/// application has returned.
struct EventLoopGroupService: Service {
    let group: MultiThreadedEventLoopGroup
    let logger: Logger

    init(_ group: MultiThreadedEventLoopGroup, logger: Logger) {
        self.group = group
        self.logger = logger
    }

    func run() async throws {
        // Returns when graceful shutdown begins for this service; throws when cancelled.
        do { try await gracefulShutdown() } catch { return }
        await shutDown(group, logger: logger)
    }
}

/// Shuts down the event loops `app` runs on when they are its own (`--event-loops`), not NIO's
/// shared ones — after the application has returned or thrown, whether or not its
/// ``EventLoopGroupService`` already did (a group shut down answers at once).
public func shutDownEventLoops(of app: some ApplicationProtocol, logger: Logger) async {
    guard app.eventLoopGroup !== MultiThreadedEventLoopGroup.singleton else { return }
    await shutDown(app.eventLoopGroup, logger: logger)
}

private func shutDown(_ group: any EventLoopGroup, logger: Logger) async {
    do { try await group.shutdownGracefully() } catch {
        logger.error("shutting down the event loops failed", metadata: ["error": "\(error)"])
    }
}
