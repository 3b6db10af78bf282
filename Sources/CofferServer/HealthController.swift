import CofferCore
import Hummingbird
import NIOCore

/// Probes and metrics: `/healthz` (the process answers), `/readyz` (storage answers and the
/// ledger's seal is intact), `/metrics` (Prometheus).
struct HealthController {
    let catalogue: any CatalogueRepository
    let ledgerAudit: any LedgerAuditRepository
    let metrics: CofferMetrics

    func add(to router: Router<CofferRequestContext>) {
        router.get("/healthz") { _, _ in try JSON.response(["status": "ok"]) }
        router.get("/readyz") { _, context in try await ready(context) }
        router.get("/metrics") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4"], body: .init(byteBuffer: ByteBuffer(string: metrics.render())))
        }
    }

    func ready(_ context: CofferRequestContext) async throws -> Response {
        do {
            _ = try await catalogue.products()
        } catch {
            throw Problem(.notReady, "the database is not answering")
        }
        // Never ready on a ledger changed behind the server's back: it would refuse every write.
        do { try await ledgerAudit.sealIntact() } catch {
            context.logger.critical("the ledger's seal is broken", metadata: ["error": "\(error)"])
            throw Problem(.ledgerSealBroken, "the ledger does not end where this server sealed it")
        }
        return try JSON.response(["status": "ready"])
    }
}
