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
    var highWater: (@Sendable (LedgerCheckpoint) -> Void)? = nil

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
            if let highWater, let seal = try await ledger.sealedHead() { highWater(seal) }
        } catch is CancellationError {
            // Cancelled (the server failed to start or is being killed): nothing to sign, nothing to report.
        } catch {
            logger.error("ledger checkpoint failed", metadata: ["error": "\(error)"])
        }
    }
}
