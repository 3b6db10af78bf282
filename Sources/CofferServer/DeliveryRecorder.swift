import CofferCore
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// Delivery evidence, recorded off the download path: each finished download adds a report to
/// an in-memory batch (merged per redemption, asset and digest), written every second and at
/// shutdown. A download never waits on the database; a crash loses at most the last second of
/// evidence (documented). When the batch reaches ``maxPending`` keys, new keys are dropped and
/// counted (a storage outage cannot grow memory without bound).
public final class DeliveryRecorder: Service, Sendable {
    let repository: any DeliveryRepository
    let interval: Duration
    let logger: Logger
    private let state = Mutex(Batch())
    static let maxPending = 100_000

    struct Key: Hashable {
        var redemptionId: String
        var assetId: String
        var sha256: String
    }

    struct Batch {
        var pending: [Key: Delivery] = [:]
        var order: [Key] = []
        var dropped = 0

        mutating func add(_ report: Delivery) {
            let key = Key(redemptionId: report.redemptionId, assetId: report.assetId, sha256: report.sha256)
            if pending[key] != nil {
                pending[key]?.merge(report)
            } else if pending.count < DeliveryRecorder.maxPending {
                pending[key] = report
                order.append(key)
            } else {
                dropped += 1
            }
        }
    }

    public init(repository: any DeliveryRepository, interval: Duration = .seconds(1), logger: Logger) {
        self.repository = repository
        self.interval = interval
        self.logger = logger
    }

    /// Adds a finished download's report to the batch (never waits on storage).
    public func add(_ report: Delivery) { state.withLock { $0.add(report) } }

    /// Reports dropped because the batch was full.
    public var dropped: Int { state.withLock { $0.dropped } }

    /// Writes the batch; on failure it is kept (merged with what arrived meanwhile) for the next try.
    public func flush() async {
        let batch = state.withLock { batch -> [Delivery] in
            let rows = batch.order.compactMap { batch.pending[$0] }
            batch.pending = [:]
            batch.order = []
            return rows
        }
        guard !batch.isEmpty else { return }
        do {
            try await repository.record(batch)
        } catch {
            logger.warning("delivery evidence not written yet", metadata: ["rows": "\(batch.count)", "error": "\(error)"])
            state.withLock { pending in for report in batch { pending.add(report) } }
        }
    }

    public func run() async throws {
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: self.interval) }
            await flush()
        }
        await flush()
    }
}
