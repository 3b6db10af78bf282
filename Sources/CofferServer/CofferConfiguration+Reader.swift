import CofferCore
import Configuration
import Foundation
import Logging

extension CofferConfiguration {
    /// Every setting of the README's table read from `reader` (for `coffer serve`:
    /// ``reader(commandLine:environment:)``), each checked: a malformed number or a value out of
    /// range throws a ``CofferConfigurationError`` naming the setting. What `reader` does not
    /// hold keeps its default. Trust roots are only read here: ``resolveTrustAnchors()`` loads them.
    ///
    /// Async because only swift-configuration's `fetch` methods tell a missing value (nil)
    /// from a malformed one (thrown); its synchronous getters return nil for both.
    public init(reader: ConfigReader) async throws {
        self.init()
        try await readServer(reader)
        try await readLimits(reader)
        try await readLedgerAndTrust(reader)
        try await readContent(reader)
        try await readPlayers(reader)
    }

    private mutating func readPlayers(_ reader: ConfigReader) async throws {
        playerKeyFiles = try await reader.list(.playerKeys) ?? []
        playerIssuer = try await reader.string(.playerIssuer)
        playerAudience = try await reader.string(.playerAudience)
        playerAccountClaim = try await reader.string(.playerAccountClaim) ?? playerAccountClaim
        let given = [!playerKeyFiles.isEmpty, playerIssuer != nil, playerAudience != nil]
        if given.contains(true), given.contains(false) {
            throw CofferConfigurationError("player identity needs all of --player-key, --player-issuer and --player-audience")
        }
        if let refunds = try await reader.string(.partialRefunds) {
            switch refunds {
            case "revoke": refundPolicy = .revokeAny
            case "keep": refundPolicy = .revokeFullOnly
            default: throw CofferConfigurationError("partial-refunds must be revoke (any refund revokes) or keep (only a full refund revokes)")
            }
        }
        if let legacy = try await reader.string(.legacyReceipts) {
            guard let policy = LegacyReceiptPolicy(rawValue: legacy) else {
                throw CofferConfigurationError("legacy-receipts must be accept (legacy app receipts are redeemed) or refuse (StoreKit 2 only)")
            }
            legacyReceipts = policy
        }
    }

    private mutating func readContent(_ reader: ConfigReader) async throws {
        contentStore = try await reader.string(.contentStore)
        if let store = contentStore, !store.hasPrefix("s3://") {
            throw CofferConfigurationError("content-store must be s3://BUCKET[/PREFIX] (omit it for DATA/content/)")
        }
        s3Endpoint = try await reader.string(.s3Endpoint)
        s3Region = try await reader.string(.s3Region) ?? s3Region
        s3PartSize =
            try await reader.integer(.s3PartSize, in: (5 * 1024 * 1024)...(512 * 1024 * 1024)) { _ in
                "s3-part-size must be 5 MiB – 512 MiB (5242880–536870912 bytes): one part per upload is held in memory"
            } ?? s3PartSize
        contentCacheSize =
            try await reader.integer(.contentCacheSize, in: 0...(1 << 50)) { _ in
                "content-cache-size must be 0 (no cache) to 2^50 bytes"
            } ?? contentCacheSize
        if contentStore == nil, s3Endpoint != nil {
            throw CofferConfigurationError("s3-endpoint is set but content-store is not s3://…")
        }
        if let mode = try await reader.string(.downloadMode) {
            guard let parsed = DownloadMode(rawValue: mode) else { throw CofferConfigurationError("download-mode must be stream, redirect or accel") }
            downloadMode = parsed
        } else if accelRedirectPrefix != nil {
            downloadMode = .accel  // as before --download-mode existed
        }
        switch downloadMode {
        case .accel where accelRedirectPrefix == nil:
            throw CofferConfigurationError("download-mode accel needs --accel-redirect PREFIX (nginx's internal location)")
        case .stream where accelRedirectPrefix != nil, .redirect where accelRedirectPrefix != nil:
            throw CofferConfigurationError("accel-redirect is only used with download-mode accel")
        case .redirect where contentStore == nil:
            throw CofferConfigurationError("download-mode redirect needs an object store (--content-store s3://…): a local directory has no URLs")
        default: break
        }
    }

    private mutating func readServer(_ reader: ConfigReader) async throws {
        host = try await reader.string(.host) ?? host
        port = try await reader.integer(.port, in: 0...65535) { "port \($0) is out of range" } ?? port
        eventLoops = try await reader.integer(.eventLoops, in: 1...256) { _ in "event-loops must be 1–256 threads" }
        dataDirectory = try await reader.string(.dataDirectory) ?? dataDirectory
        bundleIds = Set(try await reader.list(.bundleIds) ?? [])
        appAppleId = try await reader.integer(.appAppleId).map(Int64.init)
        if let ttl = try await reader.integer(.tokenTTL, in: 10...86400, else: { _ in "token TTL must be 10–86400 seconds" }) {
            tokenTTL = TimeInterval(ttl)
        }
        uploadLimit = try await reader.integer(.uploadLimit, in: 1..., else: { _ in "upload limit must be positive" }).map(Int64.init) ?? uploadLimit
        if let level = try await reader.string(.logLevel) {
            guard let parsed = Logger.Level(rawValue: level) else { throw CofferConfigurationError("unknown log level \(level)") }
            logLevel = parsed
        }
        tokenKeyBase64 = try await reader.string(.tokenKey)
        let proxies = try await reader.list(.trustedProxies) ?? []
        // Parsed, not just checked for address characters: a typo such as 1.2.3 would never match a peer.
        for proxy in proxies where IPAddress.parse(proxy) == nil {
            throw CofferConfigurationError("trusted proxy \(proxy) is not an IPv4 or IPv6 address")
        }
        trustedProxies = Set(proxies)
    }

    private mutating func readLimits(_ reader: ConfigReader) async throws {
        redemptionsPerMinute = try await reader.integer(.rateRedemptions, in: 0...) { _ in "rate-redemptions must be ≥ 0" } ?? redemptionsPerMinute
        redemptionBurst = try await reader.integer(.rateRedemptionBurst, in: 1...) { _ in "rate-redemption-burst must be ≥ 1" } ?? redemptionBurst
        authFailuresPerMinute =
            try await reader.integer(.rateAuthFailures, in: 0...) { _ in "rate-auth-failures must be ≥ 0" } ?? authFailuresPerMinute
        recordedRefusalsPerHour =
            try await reader.integer(.rateRecordedRefusals, in: 0...) { _ in "rate-recorded-refusals must be ≥ 0" } ?? recordedRefusalsPerHour
        notificationsPerMinute =
            try await reader.integer(.rateNotifications, in: 0...) { _ in "rate-notifications must be ≥ 0" } ?? notificationsPerMinute
        notificationBurst =
            try await reader.integer(.rateNotificationBurst, in: 1...) { _ in "rate-notification-burst must be ≥ 1" } ?? notificationBurst
        downloadStallTimeoutSeconds =
            try await reader.integer(.downloadStallTimeout, in: 1...3600) { _ in "download-stall-timeout must be 1–3600 seconds" }.map(Int64.init)
            ?? downloadStallTimeoutSeconds
        maxDownloadsPerAddress =
            try await reader.integer(.downloadsPerAddress, in: 0...) { _ in "downloads-per-address must be ≥ 0" } ?? maxDownloadsPerAddress
        // At least one largest JSON body must fit, or large receipts could never be redeemed.
        let smallestBudget = jsonBodyLimit
        bodyBudgetBytes =
            try await reader.integer(.bodyBudget, in: smallestBudget...) { _ in "body-budget must be ≥ \(smallestBudget) bytes" } ?? bodyBudgetBytes
        if let prefix = try await reader.string(.accelRedirect) {
            guard prefix.hasPrefix("/"), prefix.hasSuffix("/"), !prefix.contains(".."), prefix.utf8.count <= 128 else {
                throw CofferConfigurationError("accel-redirect must be a path like /_coffer/ (starting and ending with /)")
            }
            accelRedirectPrefix = prefix
        }
    }

    private mutating func readLedgerAndTrust(_ reader: ConfigReader) async throws {
        checkpointEvery =
            try await reader.integer(.checkpointEvery, in: 1...1_000_000) { _ in "checkpoint-every must be 1–1000000 entries" }.map(Int64.init)
            ?? checkpointEvery
        checkpointIntervalSeconds =
            try await reader.integer(.checkpointInterval, in: 1...86400) { _ in "checkpoint-interval must be 1–86400 seconds" }.map(Int64.init)
            ?? checkpointIntervalSeconds
        ledgerKeyFile = try await reader.string(.ledgerKey)
        databaseURL = try await reader.string(.database)
        databasePoolSize =
            try await reader.integer(.databasePoolSize, in: 1...1000) { _ in "database-pool-size must be 1–1000 connections" } ?? databasePoolSize
        auditConcurrency =
            try await reader.integer(.auditConcurrency, in: 1...1000) { _ in "audit-concurrency must be 1–1000 requests" }
            ?? (databaseURL == nil ? auditConcurrency : min(auditConcurrency, max(1, databaseSharedConnections / 2)))
        roots = try await reader.list(.roots) ?? []
        environments = try await reader.list(.environments) ?? []
    }
}

extension ConfigReader {
    fileprivate func string(_ setting: CofferSetting) async throws -> String? {
        try await fetchString(forKey: ConfigKey(setting.key), isSecret: setting.isSecret)
    }

    fileprivate func list(_ setting: CofferSetting) async throws -> [String]? {
        try await fetchStringArray(forKey: ConfigKey(setting.key))
    }

    /// A number; a value that is not one is an error naming its variable, as the environment
    /// spells it (flags are parsed by ArgumentParser, the config file is checked on loading).
    fileprivate func integer(_ setting: CofferSetting) async throws -> Int? {
        do {
            return try await fetchInt(forKey: ConfigKey(setting.key))
        } catch {
            guard let text = try? await fetchString(forKey: ConfigKey(setting.key)) else {
                throw CofferConfigurationError("\(setting.key): \(error)")
            }
            throw CofferConfigurationError("\(setting.environmentVariable)=\(text) is not a number")
        }
    }

    /// A number within `range`; one outside it throws `message(value)`.
    fileprivate func integer(
        _ setting: CofferSetting, in range: some RangeExpression<Int>, else message: (Int) -> String
    ) async throws -> Int? {
        guard let value = try await integer(setting) else { return nil }
        guard range.contains(value) else { throw CofferConfigurationError(message(value)) }
        return value
    }
}
