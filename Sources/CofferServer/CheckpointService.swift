import CofferCore
import Foundation
import Logging
import ServiceLifecycle

/// Signs a checkpoint every `interval` when the ledger has grown, and a last one at shutdown.
struct CheckpointService: Service {
    let ledger: any LedgerAuditRepository
    let interval: Duration
    let logger: Logger
    /// Raises the ledger's high-water mark to the seal after each checkpoint (nil: none kept).
    var highWater: (any LedgerHighWaterMark)? = nil

    func run() async throws {
        // The sleep ends early on graceful shutdown, so the last entries get a checkpoint.
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
            await checkpoint()
        }
    }

    func checkpoint() async {
        do {
            if let c = try await ledger.checkpointHead(now: Date()) {
                logger.debug("ledger checkpoint", metadata: ["sequence": "\(c.sequence)", "entryHash": "\(c.entryHash)"])
            }
        } catch is CancellationError {
            return
        } catch {
            logger.error("ledger checkpoint failed", metadata: ["error": "\(error)"])
        }
        do { try await highWater?.raise(ledger) } catch is CancellationError {
            // Cancelled: nothing to report.
        } catch {
            // A ledger behind the mark while this server runs (a failover that lost commits, a
            // restore: /readyz says so, critically), or a database that does not answer: the
            // mark stays where it was.
            logger.error("the ledger's high-water mark was not raised", metadata: ["error": "\(error)"])
        }
    }
}
