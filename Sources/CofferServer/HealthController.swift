import CofferCore
import Hummingbird
import NIOCore

/// Probes and metrics: `/healthz` (the process answers), `/readyz` (storage answers and the
/// ledger's seal is intact), `/metrics` (Prometheus).
struct HealthController {
    let catalogue: any CatalogueRepository
    let ledgerAudit: any LedgerAuditRepository
    let metrics: CofferMetrics
    /// The ledger's high-water mark (nil: none kept): never ready on a ledger behind it.
    var highWater: (any LedgerHighWaterMark)? = nil
    /// `/readyz` answers anyone (a load balancer's probe) and each check reads the database:
    /// one check at a time, its outcome shared for ``readinessMaxAge``, so a flood of probes
    /// costs the database one check a second per instance.
    let readiness = SharedOutcome<Readiness>()
    static let readinessMaxAge: Duration = .seconds(1)

    enum Readiness: Sendable {
        case ready
        case notReady
        case sealBroken
        case wentBack
    }

    func add(to router: Router<CofferRequestContext>) {
        router.get("/healthz") { _, _ in try JSON.response(["status": "ok"]) }
        router.get("/readyz") { _, context in try await ready(context) }
        router.get("/metrics") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4"], body: .init(byteBuffer: ByteBuffer(string: metrics.render())))
        }
    }

    func ready(_ context: CofferRequestContext) async throws -> Response {
        let logger = context.logger
        let (catalogue, ledgerAudit, highWater) = (self.catalogue, self.ledgerAudit, self.highWater)
        let outcome = await readiness.value(maxAge: Self.readinessMaxAge) { () async -> Readiness in
            do {
                _ = try await catalogue.products()
            } catch {
                return .notReady
            }
            // Never ready on a ledger changed behind the server's back: it would refuse every write.
            do { try await ledgerAudit.sealIntact() } catch {
                logger.critical("the ledger's seal is broken", metadata: ["error": "\(error)"])
                return .sealBroken
            }
            // Nor on one put back behind what this data directory saw sealed (a failover that
            // lost commits, a restore): its seal agrees with it, the mark does not.
            do { try await highWater?.check(ledgerAudit) } catch {
                logger.critical("the ledger went back", metadata: ["error": "\(error)"])
                return .wentBack
            }
            return .ready
        }
        switch outcome {
        case .ready: return try JSON.response(["status": "ready"])
        case .notReady: throw Problem(.notReady, "the database is not answering")
        case .sealBroken: throw Problem(.ledgerSealBroken, "the ledger does not end where this server sealed it")
        case .wentBack: throw Problem(.ledgerSealBroken, "the ledger went back behind what this server saw sealed")
        }
    }
}

/// One computation at a time, its value shared with every caller until it is `maxAge` old
/// (counted from its start): callers that arrive while it runs wait for it, however long it
/// takes — a slow database must not make a flood of probes start one check per `maxAge`,
/// each holding a pooled connection.
actor SharedOutcome<Value: Sendable> {
    private var last: (started: ContinuousClock.Instant, task: Task<Value, Never>)?
    private var running = false
    /// Callers that waited for, or took, a computation another started (tests wait on it).
    private(set) var joined = 0

    func value(maxAge: Duration, _ compute: @escaping @Sendable () async -> Value) async -> Value {
        let now = ContinuousClock.now
        if let last, running || now - last.started < maxAge {
            joined += 1
            return await last.task.value
        }
        let task = Task { await compute() }
        last = (now, task)
        running = true
        let value = await task.value
        if last?.task == task { running = false }
        return value
    }
}
