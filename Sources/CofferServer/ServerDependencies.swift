import CofferCore

/// What the HTTP layer is built over: the storage seams (protocols — the embedded database today, PostgreSQL
/// and object stores next, in-memory doubles in tests) and the keys. The composition root
/// (`CofferApp`) opens the implementations and hands them to ``buildApplication(_:dependencies:runtime:logger:)``;
/// each controller takes only what it uses.
public struct ServerDependencies: Sendable {
    public var catalogue: any CatalogueRepository
    public var ledger: any LedgerRepository
    public var ledgerAudit: any LedgerAuditRepository
    public var keys: any KeyRepository
    public var adminLog: any AdminLogRepository
    public var content: any ContentStore
    /// Signs and verifies download tokens.
    public var tokens: TokenSigner
    /// The ledger checkpoint key (its public half is served to auditors).
    public var ledgerSigner: LedgerSigner
    /// Delivery evidence, batched (nil: none recorded). Run as a service by ``buildApplication(_:dependencies:runtime:services:logger:)``.
    public var deliveries: DeliveryRecorder?
    /// Player identity (nil: not configured).
    public var players: PlayerTokens?
    /// The ledger's high-water mark outside the database (nil: none kept): raised by the
    /// checkpoint service at every interval and at shutdown, checked by `/readyz`.
    public var ledgerHighWater: (any LedgerHighWaterMark)?

    public init(
        catalogue: any CatalogueRepository, ledger: any LedgerRepository, ledgerAudit: any LedgerAuditRepository, keys: any KeyRepository,
        adminLog: any AdminLogRepository, content: any ContentStore, tokens: TokenSigner, ledgerSigner: LedgerSigner,
        deliveries: DeliveryRecorder? = nil, players: PlayerTokens? = nil, ledgerHighWater: (any LedgerHighWaterMark)? = nil
    ) {
        self.ledgerHighWater = ledgerHighWater
        self.deliveries = deliveries
        self.players = players
        self.catalogue = catalogue
        self.ledger = ledger
        self.ledgerAudit = ledgerAudit
        self.keys = keys
        self.adminLog = adminLog
        self.content = content
        self.tokens = tokens
        self.ledgerSigner = ledgerSigner
    }
}

/// The furthest the ledger was seen sealed, kept outside its database (`DATA/ledger-high-water.json`):
/// a database put back to an older state brings an older chain and a seal that agree, which
/// only a mark kept elsewhere can tell.
public protocol LedgerHighWaterMark: Sendable {
    /// Throws when `ledger` ends before the mark or holds another entry at its sequence.
    func check(_ ledger: any LedgerAuditRepository) async throws
    /// ``check(_:)``, then raises the mark to the ledger's seal when it is further and signed
    /// by this server's key. Never lowers it, and never moves it onto a chain that fails the check.
    func raise(_ ledger: any LedgerAuditRepository) async throws
}

/// The server's own in-process state, shared by the routes of one application: metrics and
/// the upload gate. Tests make their own to observe it.
public struct ServerRuntime: Sendable {
    public let metrics: CofferMetrics
    /// Uploads in progress (``CofferConfiguration/maxConcurrentUploads``).
    let uploads: Gate
    /// `/v1/audit` requests reading the database (``CofferConfiguration/auditConcurrency``)…
    let audits: Gate
    /// …and audit exports streaming (twice as many).
    let auditStreams: Gate
    /// Objects found changed in the content store, served to nobody until they match again.
    public let quarantine: ContentQuarantine

    public init(
        _ configuration: CofferConfiguration, metrics: CofferMetrics = CofferMetrics(), quarantine: ContentQuarantine = ContentQuarantine()
    ) {
        self.metrics = metrics
        self.quarantine = quarantine
        self.uploads = Gate(capacity: configuration.maxConcurrentUploads)
        self.audits = Gate(capacity: configuration.auditConcurrency)
        self.auditStreams = Gate(capacity: 2 * configuration.auditConcurrency)
    }

    /// Uploads in progress now (tests wait on it instead of sleeping).
    public var uploadsInProgress: Int { uploads.inUse }

    /// Audit requests in progress now (tests wait on it instead of sleeping).
    public var auditsInProgress: Int { audits.inUse }

    /// Audit exports streaming now.
    public var auditStreamsInProgress: Int { auditStreams.inUse }
}
