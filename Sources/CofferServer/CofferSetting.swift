/// One setting of `coffer serve`: its key (the config file's key, and the key
/// ``CofferConfiguration/init(reader:)`` reads), its flag and its `COFFER_*` environment
/// variable — the README's configuration table, as data. The environment provider and the
/// config file's check of unknown keys are built from ``all``.
public struct CofferSetting: Sendable, Hashable {
    /// How a value is written.
    public enum Kind: Sendable, Hashable {
        case string
        case integer
        /// A repeated flag, a comma list in the environment, an array of strings in the file.
        case list
    }

    /// The config file key and the key in the ``CofferConfiguration/init(reader:)`` reader.
    public let key: String
    public let kind: Kind
    /// The flag of `coffer serve`, when it has one.
    public let flag: String?
    /// The environment variable.
    public let environmentVariable: String
    /// Whether the config file may set it (not the token key, a secret; not the file's own path).
    public let inConfigFile: Bool
    /// Never printed: read as a secret.
    public let isSecret: Bool

    init(_ key: String, _ kind: Kind, flag: String?, environment: String, inConfigFile: Bool = true, isSecret: Bool = false) {
        self.key = key
        self.kind = kind
        self.flag = flag
        self.environmentVariable = environment
        self.inConfigFile = inConfigFile
        self.isSecret = isSecret
    }

    public static let host = Self("host", .string, flag: "--host", environment: "COFFER_HOST")
    public static let port = Self("port", .integer, flag: "--port", environment: "COFFER_PORT")
    public static let dataDirectory = Self("dataDirectory", .string, flag: "--data-dir", environment: "COFFER_DATA_DIR")
    public static let bundleIds = Self("bundleIds", .list, flag: "--bundle-id", environment: "COFFER_BUNDLE_IDS")
    public static let appAppleId = Self("appAppleId", .integer, flag: "--app-apple-id", environment: "COFFER_APP_APPLE_ID")
    public static let roots = Self("roots", .list, flag: "--root", environment: "COFFER_ROOTS")
    public static let environments = Self("environments", .list, flag: "--environment", environment: "COFFER_ENVIRONMENTS")
    public static let tokenTTL = Self("tokenTTL", .integer, flag: "--token-ttl", environment: "COFFER_TOKEN_TTL")
    public static let uploadLimit = Self("uploadLimit", .integer, flag: "--upload-limit", environment: "COFFER_UPLOAD_LIMIT")
    public static let logLevel = Self("logLevel", .string, flag: "--log-level", environment: "COFFER_LOG_LEVEL")
    public static let rateRedemptions = Self("rateRedemptions", .integer, flag: "--rate-redemptions", environment: "COFFER_RATE_REDEMPTIONS")
    public static let rateRedemptionBurst = Self(
        "rateRedemptionBurst", .integer, flag: "--rate-redemption-burst", environment: "COFFER_RATE_REDEMPTION_BURST")
    public static let rateAuthFailures = Self("rateAuthFailures", .integer, flag: "--rate-auth-failures", environment: "COFFER_RATE_AUTH_FAILURES")
    public static let rateRecordedRefusals = Self(
        "rateRecordedRefusals", .integer, flag: "--rate-recorded-refusals", environment: "COFFER_RATE_RECORDED_REFUSALS")
    public static let rateNotifications = Self(
        "rateNotifications", .integer, flag: "--rate-notifications", environment: "COFFER_RATE_NOTIFICATIONS")
    public static let rateNotificationBurst = Self(
        "rateNotificationBurst", .integer, flag: "--rate-notification-burst", environment: "COFFER_RATE_NOTIFICATION_BURST")
    public static let downloadStallTimeout = Self(
        "downloadStallTimeout", .integer, flag: "--download-stall-timeout", environment: "COFFER_DOWNLOAD_STALL_TIMEOUT")
    public static let downloadsPerAddress = Self(
        "downloadsPerAddress", .integer, flag: "--downloads-per-address", environment: "COFFER_DOWNLOADS_PER_ADDRESS")
    public static let bodyBudget = Self("bodyBudget", .integer, flag: "--body-budget", environment: "COFFER_BODY_BUDGET")
    public static let accelRedirect = Self("accelRedirect", .string, flag: "--accel-redirect", environment: "COFFER_ACCEL_REDIRECT")
    public static let checkpointEvery = Self("checkpointEvery", .integer, flag: "--checkpoint-every", environment: "COFFER_CHECKPOINT_EVERY")
    public static let checkpointInterval = Self(
        "checkpointInterval", .integer, flag: "--checkpoint-interval", environment: "COFFER_CHECKPOINT_INTERVAL")
    public static let ledgerKey = Self("ledgerKey", .string, flag: "--ledger-key", environment: "COFFER_LEDGER_KEY")
    public static let trustedProxies = Self("trustedProxies", .list, flag: "--trusted-proxy", environment: "COFFER_TRUSTED_PROXIES")
    /// The shared database's URL (it may hold a password: read as a secret, printed redacted).
    public static let database = Self("database", .string, flag: "--database", environment: "COFFER_DATABASE_URL", isSecret: true)
    public static let databasePoolSize = Self(
        "databasePoolSize", .integer, flag: "--database-pool-size", environment: "COFFER_DATABASE_POOL_SIZE")
    public static let auditConcurrency = Self(
        "auditConcurrency", .integer, flag: "--audit-concurrency", environment: "COFFER_AUDIT_CONCURRENCY")
    public static let eventLoops = Self("eventLoops", .integer, flag: "--event-loops", environment: "COFFER_EVENT_LOOPS")
    public static let contentStore = Self("contentStore", .string, flag: "--content-store", environment: "COFFER_CONTENT_STORE")
    public static let s3Endpoint = Self("s3Endpoint", .string, flag: "--s3-endpoint", environment: "COFFER_S3_ENDPOINT")
    public static let s3Region = Self("s3Region", .string, flag: "--s3-region", environment: "COFFER_S3_REGION")
    public static let s3PartSize = Self("s3PartSize", .integer, flag: "--s3-part-size", environment: "COFFER_S3_PART_SIZE")
    public static let contentCacheSize = Self(
        "contentCacheSize", .integer, flag: "--content-cache-size", environment: "COFFER_CONTENT_CACHE_SIZE")
    public static let downloadMode = Self("downloadMode", .string, flag: "--download-mode", environment: "COFFER_DOWNLOAD_MODE")
    public static let playerKeys = Self("playerKeys", .list, flag: "--player-key", environment: "COFFER_PLAYER_KEYS")
    public static let playerIssuer = Self("playerIssuer", .string, flag: "--player-issuer", environment: "COFFER_PLAYER_ISSUER")
    public static let playerAudience = Self("playerAudience", .string, flag: "--player-audience", environment: "COFFER_PLAYER_AUDIENCE")
    public static let playerAccountClaim = Self(
        "playerAccountClaim", .string, flag: "--player-account-claim", environment: "COFFER_PLAYER_ACCOUNT_CLAIM")
    public static let partialRefunds = Self("partialRefunds", .string, flag: "--partial-refunds", environment: "COFFER_PARTIAL_REFUNDS")
    public static let legacyReceipts = Self("legacyReceipts", .string, flag: "--legacy-receipts", environment: "COFFER_LEGACY_RECEIPTS")
    /// The download-token HMAC key: environment only, a secret.
    public static let tokenKey = Self("tokenKey", .string, flag: nil, environment: "COFFER_TOKEN_KEY", inConfigFile: false, isSecret: true)
    /// The config file's own path.
    public static let config = Self("config", .string, flag: "--config", environment: "COFFER_CONFIG", inConfigFile: false)

    /// Every setting, in the README's order.
    public static let all: [CofferSetting] = [
        host, port, dataDirectory, bundleIds, appAppleId, roots, environments, tokenTTL, uploadLimit, logLevel, rateRedemptions,
        rateRedemptionBurst, rateAuthFailures, rateRecordedRefusals, rateNotifications, rateNotificationBurst, downloadStallTimeout,
        downloadsPerAddress, bodyBudget,
        accelRedirect, checkpointEvery, checkpointInterval, ledgerKey, database, databasePoolSize, auditConcurrency, eventLoops, trustedProxies,
        contentStore,
        s3Endpoint,
        s3Region, s3PartSize, contentCacheSize, downloadMode, playerKeys, playerIssuer, playerAudience, playerAccountClaim, partialRefunds,
        legacyReceipts,
        tokenKey,
        config,
    ]

    /// The keys a config file may hold.
    public static var configFileKeys: Set<String> { Set(all.filter(\.inConfigFile).map(\.key)) }
}
