import CofferCore
import Foundation
import Logging

/// Everything the server needs to know. Filled by `coffer serve` from flags, `COFFER_*`
/// environment variables and an optional config file (see the README's table) through
/// ``init(reader:)``.
public struct CofferConfiguration: Sendable {
    public var host = "127.0.0.1"
    public var port = 8080
    /// Holds coffer.sqlite, content/, keys/ (and sandbox/ in demo mode): see `DataDirectory`.
    public var dataDirectory = "coffer-data"
    /// The trust roots as configured, `[ENV=]FILE` each (none: Apple's built-in roots), and the
    /// accepted environments (none: Production); ``resolveTrustAnchors()`` turns them into ``anchors``.
    public var roots: [String] = []
    public var environments: [String] = []
    public var anchors: [TrustAnchor] = []
    public var bundleIds: Set<String> = []
    public var appAppleId: Int64?
    /// Lifetime of download tokens.
    public var tokenTTL: TimeInterval = 600
    /// Largest asset upload, bytes.
    public var uploadLimit: Int64 = 512 * 1024 * 1024
    /// Largest JSON request body (a base64 receipt of 4 MiB is ~5.4 MiB).
    public var jsonBodyLimit = 8 * 1024 * 1024
    /// Idle connection timeout, seconds: also bounds how long a client may take to send its
    /// request headers.
    public var idleTimeoutSeconds: Int64 = 30
    /// JSON request bodies must arrive within this many seconds (else 408).
    public var bodyTimeoutSeconds: Int64 = 30
    public var bodyTimeout: Duration { .seconds(bodyTimeoutSeconds) }
    /// X-Accel-Redirect mode: when set (e.g. `/_coffer/`), downloads answer with this prefix
    /// plus the object's path under `DATA/content/` and an empty body, and nginx sends the
    /// bytes (sendfile, ranges) from an `internal` location. Coffer still checks the token.
    public var accelRedirectPrefix: String?
    /// Asset uploads in progress at once; more get 503 `uploadsBusy`.
    public var maxConcurrentUploads = 4
    /// Request header limits (bytes of one field, bytes of all fields, number of fields).
    public var maxHeaderFieldSize = 16 * 1024
    public var maxHeaderListSize = 32 * 1024
    public var maxHeaderFieldCount = 100
    /// A download-token HMAC key given by configuration (base64, ≥ 32 bytes), instead of the key file.
    public var tokenKeyBase64: String?
    public var logLevel: Logger.Level = .info
    /// Peers (exact IP addresses, e.g. the nginx in front) whose `X-Forwarded-For` is believed.
    public var trustedProxies: Set<String> = []
    /// Redemption and grant-exchange requests per client address per minute (0: unlimited)…
    public var redemptionsPerMinute = 600
    /// …of which this many may come at once.
    public var redemptionBurst = 200
    /// Failed authentications per client address per minute before 429 (0: unlimited).
    public var authFailuresPerMinute = 20
    /// Refusals of proofs that did not verify recorded in the ledger per client address per
    /// hour, as many at once (0: every one). Beyond them such a refusal is answered as ever,
    /// counted (`coffer_refusals_unrecorded_total`) and not written: each recorded one is a
    /// chained, append-only row for good, and 20 junk bytes a request cost no verification.
    /// Refusals of verified proofs (replays, revoked purchases…) have their own budget, per
    /// purchase (``recordedRefusalsPerPurchasePerHour``).
    public var recordedRefusalsPerHour = 120
    /// Refusals of one verified purchase (by transaction id, from any address) written to the
    /// ledger an hour per instance, as many at once; off when `recordedRefusalsPerHour` is 0.
    /// Beyond it they are answered alike and counted (`coffer_refusals_unrecorded_total`).
    /// 600: a storm of concurrent replays of one purchase (the 64 of the scale-out tests) is
    /// recorded whole, and a botnet replaying it adds at most 600 rows an hour, not one per replay.
    public var recordedRefusalsPerPurchasePerHour = 600
    /// Notifications (`POST /v1/notifications`) per client address per minute (0: unlimited)…
    /// Apple posts from a handful of addresses, so the default is generous.
    public var notificationsPerMinute = 600
    /// …of which this many may come at once.
    public var notificationBurst = 600
    /// A download whose writes make no progress (no chunk accepted by the connection) for this
    /// many seconds is closed: a client that stops reading cannot hold its connection forever.
    public var downloadStallTimeoutSeconds: Int64 = 30
    /// Streamed downloads in progress per client address; more get 429 `tooManyDownloads` (0: unlimited).
    public var maxDownloadsPerAddress = 16
    /// Request-body bytes (JSON bodies being collected) held at once by the whole server;
    /// beyond it requests get 503 `busy` with `Retry-After`. Reserved from `Content-Length`
    /// before reading, or chunk by chunk for chunked bodies.
    public var bodyBudgetBytes = 64 * 1024 * 1024
    /// Sign a ledger checkpoint every this many entries…
    public var checkpointEvery: Int64 = 1000
    /// …and every this many seconds when the ledger has grown since the last one.
    public var checkpointIntervalSeconds: Int64 = 60
    /// The ledger checkpoint signing key, outside the data directory (`--ledger-key`), so
    /// that whoever copies the database cannot re-sign a rewritten history. Nil: systemd's
    /// `$CREDENTIALS_DIRECTORY/ledger-signing.key` when present, else `DATA/keys/ledger-signing.key`.
    public var ledgerKeyFile: String?
    /// Where the catalogue, ledger, keys and admin log live: a PostgreSQL URL
    /// (`postgres://…`), shared by several instances; nil: SQLite in the data directory.
    /// Holds a password: never logged or printed whole.
    public var databaseURL: String?
    /// Connections each instance opens to the database at most.
    public var databasePoolSize = 10
    /// The connections of the pool that everything but the ledger writer shares (one of
    /// ``databasePoolSize`` is the writer's own; 1 at least).
    public var databaseSharedConnections: Int { max(1, databasePoolSize - 1) }
    /// `/v1/audit` requests reading the database at once on this instance (an export while it
    /// reads a page, not while its client reads); more get 503 `auditBusy` with `Retry-After`.
    /// Audit reads scan and page the ledger: the limit keeps an auditor's key from holding the
    /// database connections (or SQLite readers) that players' requests need. Default: 4, and
    /// on PostgreSQL half of ``databaseSharedConnections`` when that is less (1 at least).
    public var auditConcurrency = 4
    /// The HTTP server's event-loop threads; nil: one per core (NIO's shared group). Several
    /// instances on one host each take their share of the cores rather than each starting one
    /// HTTP thread per core (a few per cent less CPU per redemption for two instances on two
    /// cores, within that machine's noise: `Benchmarks/README.md`).
    public var eventLoops: Int?
    /// Where asset bytes live: `s3://BUCKET[/PREFIX]` (an S3-compatible bucket shared by
    /// several instances); nil: `DATA/content/`.
    public var contentStore: String?
    /// The S3 endpoint (MinIO, R2, Ceph, moto…; path-style requests); nil: AWS.
    public var s3Endpoint: String?
    public var s3Region = "us-east-1"
    /// Multipart part size for uploads to the bucket, bytes (5 MiB – 512 MiB; one part per upload is in memory).
    public var s3PartSize = 16 * 1024 * 1024
    /// Bytes of the bucket's objects each instance keeps in `DATA/cache` to stream them as
    /// local files (``CachedContentStore``), in stream mode; 0: none.
    public var contentCacheSize = 1024 * 1024 * 1024
    /// The cache directory when ``contentCacheSize`` applies: an object store in stream mode.
    public var contentCacheDirectory: String? {
        guard contentStore != nil, downloadMode == .stream, contentCacheSize > 0 else { return nil }
        return DataDirectory(dataDirectory).cache
    }
    /// How downloads reach the client.
    public var downloadMode: DownloadMode = .stream
    /// Where the object store's credentials (`AWS_*`) are read from; nil: this process's
    /// environment. (Tests give their own instead of changing the process's.)
    public var credentialEnvironment: [String: String]?
    /// Player identity: the login service's public keys (PEM or JWKS files), the issuer and
    /// audience its tokens must name, and the claim a signed `appAccountToken` must equal.
    /// Empty keys: no player identity.
    public var playerKeyFiles: [String] = []
    public var playerIssuer: String?
    public var playerAudience: String?
    public var playerAccountClaim = "sub"
    /// What a prorated refund does (``RefundPolicy``).
    public var refundPolicy: RefundPolicy = .revokeAny
    /// Whether legacy app receipts are redeemed (``LegacyReceiptPolicy``).
    public var legacyReceipts: LegacyReceiptPolicy = .accept

    public init() {}
}

/// How a download's bytes reach the client, once Coffer checked its token.
public enum DownloadMode: String, Sendable, Hashable, CaseIterable {
    /// Coffer streams the object (local file or object store), with Range.
    case stream
    /// 302 to a presigned URL of the object store (valid ≤ 60 s and never beyond the token).
    case redirect
    /// nginx sends the bytes (X-Accel-Redirect; `--accel-redirect` names its internal location).
    case accel
}
