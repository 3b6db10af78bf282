import CofferCore
import Foundation
import Hummingbird
import Logging
import NIOCore
import ServiceLifecycle

/// Builds the Coffer HTTP application over storage seams. `coffer serve` (through the
/// composition root, `CofferApp`) and the tests call this same function.
///
/// `services` run beside the server and are stopped after it and after the last checkpoint,
/// in reverse order: the composition root passes the event loops' shutdown (with
/// `--event-loops`), the database close, then the ledger writer (so the writer finishes its
/// queue before the database closes). The server runs on `eventLoopGroup`
/// (``CofferConfiguration/eventLoops``; its owner shuts it down), or on NIO's shared group,
/// one loop per core.
public func buildApplication(
    _ configuration: CofferConfiguration, dependencies: ServerDependencies, runtime: ServerRuntime? = nil, services: [any Service] = [],
    eventLoopGroup: (any EventLoopGroup)? = nil, logger: Logger
) -> some ApplicationProtocol {
    // A connection the peer stops reading is closed after twice the download stall timeout
    // (downloads are closed by their own watchdog first, which logs the client address).
    let writeStall = TimeAmount.seconds(2 * configuration.downloadStallTimeoutSeconds)
    return Application(
        router: buildRouter(configuration, dependencies: dependencies, runtime: runtime ?? ServerRuntime(configuration)),
        server: .http1(
            configuration: .init(
                additionalChannelHandlers: [WriteStallHandler(timeout: writeStall, logger: logger), EarlyResponseCloseHandler()],
                idleTimeout: .seconds(configuration.idleTimeoutSeconds),
                httpDecoderConfiguration: .init(
                    maxHeaderFieldSize: configuration.maxHeaderFieldSize, maxHeaderListSize: configuration.maxHeaderListSize,
                    maxHeaderFieldCount: configuration.maxHeaderFieldCount))),
        configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "Coffer"),
        // Stopped in reverse order: the server first, then the last checkpoint, then `services`.
        services: services + (dependencies.deliveries.map { [$0] } ?? []) + [
            CheckpointService(
                ledger: dependencies.ledgerAudit, interval: .seconds(configuration.checkpointIntervalSeconds), logger: logger,
                highWater: dependencies.ledgerHighWater)
        ],
        eventLoopGroupProvider: eventLoopGroup.map { .shared($0) } ?? .singleton,
        logger: logger)
}

/// The router: every route and middleware, each controller over the seams it uses.
public func buildRouter(_ c: CofferConfiguration, dependencies d: ServerDependencies, runtime: ServerRuntime) -> Router<CofferRequestContext> {
    let router = Router(context: CofferRequestContext.self)
    let metrics = runtime.metrics
    router.add(middleware: ClientAddressMiddleware(trustedProxies: c.trustedProxies))
    router.add(middleware: RequestLogMiddleware())
    router.add(middleware: ProblemMiddleware())
    // Before any route: only canonical paths are served (no `//`, `.`, `..`, trailing `/`, `%`).
    router.add(middleware: CanonicalPathMiddleware())
    // One client holds a quarter of the budget at most (never less than one largest JSON body).
    let bodyBudget = ByteBudget(capacity: c.bodyBudgetBytes, perClient: max(c.bodyBudgetBytes / 4, c.jsonBodyLimit), metrics: metrics)
    router.add(middleware: BodyBudgetMiddleware(budget: bodyBudget))

    HealthController(catalogue: d.catalogue, ledgerAudit: d.ledgerAudit, metrics: metrics, highWater: d.ledgerHighWater).add(to: router)
    ConsoleController().add(to: router)
    // Refusals written to the ledger, per address (an IPv6 /64 as one) and hour.
    let recordedRefusals = RateLimiter(perHour: c.recordedRefusalsPerHour, burst: c.recordedRefusalsPerHour)
    // Refusals of one verified purchase written to the ledger, from every address, an hour
    // (off with the address budget: --rate-recorded-refusals 0 records every refusal).
    let purchaseBudget = c.recordedRefusalsPerHour == 0 ? 0 : c.recordedRefusalsPerPurchasePerHour
    let recordedPurchaseRefusals = RateLimiter(perHour: purchaseBudget, burst: purchaseBudget)
    let vault = Vault(
        verifier: AppStoreVerifier(configuration: VerifierConfiguration(anchors: c.anchors, bundleIds: c.bundleIds, appAppleId: c.appAppleId)),
        catalogue: d.catalogue, ledger: d.ledger, tokens: d.tokens, tokenTTL: c.tokenTTL, refundPolicy: c.refundPolicy,
        legacyReceipts: c.legacyReceipts,
        mayRecordRefusal: { [metrics] address in
            guard recordedRefusals.take(IPAddress.limitKey(address)) != nil else { return true }
            metrics.refusalsUnrecorded.increment()
            return false
        },
        purchaseRefusals: { [metrics] transactionId, operation in
            switch operation {
            case .giveBack:
                recordedPurchaseRefusals.giveBack(transactionId)
                return true
            case .take:
                return recordedPurchaseRefusals.take(transactionId) == nil
            case .unrecorded:
                metrics.refusalsUnrecorded.increment()
                return true
            }
        })
    let redemptions = RedemptionController(
        vault: vault, players: d.players, metrics: metrics, jsonBodyLimit: c.jsonBodyLimit, bodyTimeout: c.bodyTimeout)
    redemptions.add(
        to: router.group().add(
            middleware: RateLimitMiddleware(limiter: RateLimiter(perMinute: c.redemptionsPerMinute, burst: c.redemptionBurst), metrics: metrics)))
    redemptions.addNotifications(
        to: router.group().add(
            middleware: RateLimitMiddleware(
                limiter: RateLimiter(perMinute: c.notificationsPerMinute, burst: c.notificationBurst), metrics: metrics, route: "notifications")))
    DownloadController(
        tokens: d.tokens, content: d.content, catalogue: d.catalogue, metrics: metrics,
        slots: DownloadSlots(perAddress: c.maxDownloadsPerAddress, metrics: metrics), mode: c.downloadMode,
        accelRedirectPrefix: c.accelRedirectPrefix,
        stallTimeoutSeconds: c.downloadStallTimeoutSeconds, quarantine: runtime.quarantine, deliveries: d.deliveries
    ).add(to: router)

    let authFailures = RateLimiter(perMinute: c.authFailuresPerMinute, burst: c.authFailuresPerMinute)
    func keyMiddleware(_ roles: Set<Role>) -> APIKeyMiddleware {
        APIKeyMiddleware(keys: d.keys, ledgerKey: d.ledgerSigner.publicKey, roles: roles, failures: authFailures, metrics: metrics)
    }
    AdminController(
        vault: vault, catalogue: d.catalogue, adminLog: d.adminLog, content: d.content, keys: d.keys, uploads: runtime.uploads,
        uploadLimit: c.uploadLimit,
        bodyTimeout: c.bodyTimeout, bundleIds: c.bundleIds
    ).add(
        to: router.group("/v1/admin").add(
            middleware: keyMiddleware([.admin])
        ))
    let audit = router.group("/v1/audit")
        .add(
            middleware: keyMiddleware([.admin, .auditor])
        )
        .add(middleware: AuditConcurrencyMiddleware(gate: runtime.audits, streams: runtime.auditStreams, metrics: metrics))
    let ledger = LedgerController(ledgerAudit: d.ledgerAudit, signer: d.ledgerSigner)
    AuditController(ledger: d.ledger, deliveries: d.deliveries?.repository, ledgerExport: ledger).add(to: audit)
    ledger.add(to: audit)
    // Which key is this: the console and scripts learn their role without probing for a 403.
    router.group("/v1/whoami").add(
        middleware: keyMiddleware([.admin, .auditor])
    )
    .get { _, context in
        guard let key = context.identity else { throw Problem(.unauthenticated, "send Authorization: Bearer <key>") }
        return try JSON.response(WhoAmI(keyId: key.keyId, name: key.name, role: key.role.rawValue, createdAt: key.createdAt))
    }
    return router
}

/// `GET /v1/whoami`: the key the request carries (never its secret or hash).
struct WhoAmI: Encodable {
    var keyId: String
    var name: String
    var role: String
    var createdAt: Date
}
