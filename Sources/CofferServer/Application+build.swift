import CofferCore
import CofferStore
import Foundation
import Hummingbird
import Logging
import NIOCore

/// Builds the Coffer HTTP application over opened services. `coffer serve` and the tests
/// call this same function.
public func buildApplication(_ services: CofferServices, logger: Logger) -> some ApplicationProtocol {
    // A connection the peer stops reading is closed after twice the download stall timeout
    // (downloads are closed by their own watchdog first, which logs the client address).
    let writeStall = TimeAmount.seconds(2 * services.configuration.downloadStallTimeoutSeconds)
    return Application(
        router: buildRouter(services),
        server: .http1(
            configuration: .init(
                additionalChannelHandlers: [WriteStallHandler(timeout: writeStall, logger: logger)],
                idleTimeout: .seconds(services.configuration.idleTimeoutSeconds),
                httpDecoderConfiguration: .init(
                    maxHeaderFieldSize: services.configuration.maxHeaderFieldSize, maxHeaderListSize: services.configuration.maxHeaderListSize,
                    maxHeaderFieldCount: services.configuration.maxHeaderFieldCount))),
        configuration: .init(address: .hostname(services.configuration.host, port: services.configuration.port), serverName: "Coffer"),
        services: [
            CheckpointService(
                ledger: services.ledger, interval: .seconds(services.configuration.checkpointIntervalSeconds), logger: logger)
        ],
        logger: logger)
}

/// The router: every route and middleware.
public func buildRouter(_ services: CofferServices) -> Router<CofferRequestContext> {
    let router = Router(context: CofferRequestContext.self)
    let c = services.configuration
    router.add(middleware: ClientAddressMiddleware(trustedProxies: c.trustedProxies))
    router.add(middleware: RequestLogMiddleware())
    router.add(middleware: ProblemMiddleware())
    // Before any route: only canonical paths are served (no `//`, `.`, `..`, trailing `/`, `%`).
    router.add(middleware: CanonicalPathMiddleware())
    router.add(middleware: BodyBudgetMiddleware(budget: ByteBudget(capacity: c.bodyBudgetBytes, metrics: services.metrics)))

    router.get("/healthz") { _, _ in try JSON.response(["status": "ok"]) }
    router.get("/readyz") { _, context in
        do {
            _ = try await services.catalogue.products()
        } catch {
            throw Problem(.serviceUnavailable, "notReady", "the database is not answering")
        }
        // Never ready on a ledger changed behind the server's back: it would refuse every write.
        do { try await services.ledger.sealIntact() } catch {
            context.logger.critical("the ledger's seal is broken", metadata: ["error": "\(error)"])
            throw Problem(.serviceUnavailable, "ledgerSealBroken", "the ledger does not end where this server sealed it")
        }
        return try JSON.response(["status": "ready"])
    }
    router.get("/metrics") { _, _ in
        Response(
            status: .ok, headers: [.contentType: "text/plain; version=0.0.4"], body: .init(byteBuffer: ByteBuffer(string: services.metrics.render())))
    }

    let redemptionLimiter = RateLimiter(perMinute: c.redemptionsPerMinute, burst: c.redemptionBurst)
    let notificationLimiter = RateLimiter(perMinute: c.notificationsPerMinute, burst: c.notificationBurst)
    let authFailures = RateLimiter(perMinute: c.authFailuresPerMinute, burst: c.authFailuresPerMinute)
    RedemptionController(services: services).add(
        to: router.group().add(middleware: RateLimitMiddleware(limiter: redemptionLimiter, metrics: services.metrics)))
    DownloadController(services: services, slots: DownloadSlots(perAddress: c.maxDownloadsPerAddress, metrics: services.metrics)).add(to: router)
    router.group().add(middleware: RateLimitMiddleware(limiter: notificationLimiter, metrics: services.metrics, route: "notifications"))
        .post("/v1/notifications") { request, context in
            try await RedemptionController(services: services).notification(request, context: context)
        }
    AdminController(services: services).add(
        to: router.group("/v1/admin").add(
            middleware: APIKeyMiddleware(keys: services.keys, roles: [.admin], failures: authFailures, metrics: services.metrics)))
    let audit = router.group("/v1/audit").add(
        middleware: APIKeyMiddleware(keys: services.keys, roles: [.admin, .auditor], failures: authFailures, metrics: services.metrics))
    AuditController(services: services).add(to: audit)
    LedgerController(services: services).add(to: audit)
    return router
}
