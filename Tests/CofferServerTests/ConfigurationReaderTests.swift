import CofferApp
import CofferCore
import CofferServer
import CofferTestSupport
import Configuration
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOPosix
import Testing

/// The configuration pipeline as a library: `CofferConfiguration.reader(commandLine:environment:)`
/// (flags > `COFFER_*` environment > JSON config file > defaults) read by
/// `CofferConfiguration(reader:)`, and `buildApplication(reader:logger:)`.
struct ConfigurationReaderTests {
    /// The flags `coffer` hands over, under their settings' keys.
    static func flags(_ values: [CofferSetting: ConfigContent]) -> InMemoryProvider {
        InMemoryProvider(
            name: "flags",
            values: Dictionary(uniqueKeysWithValues: values.map { (AbsoluteConfigKey([$0.key.key]), ConfigValue($0.value, isSecret: false)) }))
    }

    static func configuration(
        flags: [CofferSetting: ConfigContent] = [:], environment: [String: String] = [:], file: String? = nil
    ) async throws -> CofferConfiguration {
        try await withTemporaryDirectory(prefix: "coffer-config") { directory in
            var environment = environment
            if let file {
                let path = directory.appendingPathComponent("coffer.json").path
                try Data(file.utf8).write(to: URL(fileURLWithPath: path))
                environment["COFFER_CONFIG"] = path
            }
            let reader = try await CofferConfiguration.reader(commandLine: Self.flags(flags), environment: environment)
            return try await CofferConfiguration(reader: reader)
        }
    }

    /// A string, a number and two lists, each from every layer in turn: the highest layer that
    /// sets it wins, and unset layers let the lower ones show through.
    @Test func flagsBeatEnvironmentBeatFileBeatDefaults() async throws {
        let file = #"{"host":"file.example","port":9000,"bundleIds":["com.file"],"trustedProxies":["10.0.0.9"],"tokenTTL":120}"#
        let environment = ["COFFER_HOST": "env.example", "COFFER_PORT": "9100", "COFFER_BUNDLE_IDS": "com.env1, com.env2"]
        let flags: [CofferSetting: ConfigContent] = [.host: .string("flag.example"), .bundleIds: .stringArray(["com.flag"])]

        let defaults = try await Self.configuration()
        #expect(defaults.host == "127.0.0.1" && defaults.port == 8080 && defaults.bundleIds.isEmpty && defaults.trustedProxies.isEmpty)
        #expect(defaults.tokenTTL == 600)

        let fromFile = try await Self.configuration(file: file)
        #expect(fromFile.host == "file.example" && fromFile.port == 9000)
        #expect(fromFile.bundleIds == ["com.file"] && fromFile.trustedProxies == ["10.0.0.9"])

        let fromEnvironment = try await Self.configuration(environment: environment, file: file)
        #expect(fromEnvironment.host == "env.example" && fromEnvironment.port == 9100)
        #expect(fromEnvironment.bundleIds == ["com.env1", "com.env2"])
        #expect(fromEnvironment.trustedProxies == ["10.0.0.9"], "not in the environment: the file's")

        let fromFlags = try await Self.configuration(flags: flags, environment: environment, file: file)
        #expect(fromFlags.host == "flag.example" && fromFlags.bundleIds == ["com.flag"])
        #expect(fromFlags.port == 9100, "no --port: the environment's")
        #expect(fromFlags.tokenTTL == 120, "only in the file: the file's")
    }

    /// What the config file sets and a flag or a variable overrides is named (the server logs
    /// it at start): the file's `host` by `--host`, its `port` by `COFFER_PORT`; its
    /// `tokenTTL`, set nowhere else, is not named, nor is a variable the file does not set.
    @Test func settingsTheFileLosesAreNamed() async throws {
        try await withTemporaryDirectory(prefix: "coffer-config") { directory in
            let path = directory.appendingPathComponent("coffer.json").path
            try Data(#"{"host":"file.example","port":9000,"tokenTTL":120,"bundleIds":null}"#.utf8).write(to: URL(fileURLWithPath: path))
            let environment = [
                "COFFER_CONFIG": path, "COFFER_PORT": "9100", "COFFER_HOST": "env.example", "COFFER_LOG_LEVEL": "debug", "COFFER_BUNDLE_IDS": "a",
            ]
            let lines = try await CofferConfiguration.overridden(commandLine: Self.flags([.host: .string("flag.example")]), environment: environment)
            #expect(lines == ["host (config file) is overridden by --host", "port (config file) is overridden by COFFER_PORT"])
            #expect(try await CofferConfiguration.overridden(commandLine: Self.flags([:]), environment: ["COFFER_CONFIG": path]).isEmpty)
            #expect(try await CofferConfiguration.overridden(commandLine: Self.flags([:]), environment: [:]).isEmpty, "no file")
        }
    }

    /// Every default is `CofferConfiguration()`'s when nothing is set.
    @Test func nothingSetKeepsTheDefaults() async throws {
        let read = try await Self.configuration()
        let defaults = CofferConfiguration()
        #expect(read.host == defaults.host && read.port == defaults.port && read.dataDirectory == defaults.dataDirectory)
        #expect(read.uploadLimit == defaults.uploadLimit && read.logLevel == defaults.logLevel && read.appAppleId == nil)
        #expect(read.redemptionsPerMinute == defaults.redemptionsPerMinute && read.redemptionBurst == defaults.redemptionBurst)
        #expect(read.authFailuresPerMinute == defaults.authFailuresPerMinute && read.notificationsPerMinute == defaults.notificationsPerMinute)
        #expect(read.notificationBurst == defaults.notificationBurst && read.downloadStallTimeoutSeconds == defaults.downloadStallTimeoutSeconds)
        #expect(read.maxDownloadsPerAddress == defaults.maxDownloadsPerAddress && read.bodyBudgetBytes == defaults.bodyBudgetBytes)
        #expect(read.checkpointEvery == defaults.checkpointEvery && read.checkpointIntervalSeconds == defaults.checkpointIntervalSeconds)
        #expect(read.accelRedirectPrefix == nil && read.ledgerKeyFile == nil && read.tokenKeyBase64 == nil)
        #expect(read.roots.isEmpty && read.environments.isEmpty)
    }

    /// Comma lists: entries trimmed, empty ones dropped; a variable set to nothing is an empty
    /// list that hides the file's. The token key comes from the environment only.
    @Test func environmentListsAndTheTokenKey() async throws {
        let file = #"{"bundleIds":["com.file"],"roots":["file.pem"]}"#
        let listed = try await Self.configuration(environment: ["COFFER_BUNDLE_IDS": " a, ,b,", "COFFER_ROOTS": "Sandbox=x.pem"], file: file)
        #expect(listed.bundleIds == ["a", "b"])
        #expect(listed.roots == ["Sandbox=x.pem"])
        let emptied = try await Self.configuration(environment: ["COFFER_BUNDLE_IDS": "", "COFFER_ROOTS": " , "], file: file)
        #expect(emptied.bundleIds.isEmpty && emptied.roots.isEmpty)
        let keyed = try await Self.configuration(environment: ["COFFER_TOKEN_KEY": "c2VjcmV0"])
        #expect(keyed.tokenKeyBase64 == "c2VjcmV0")
    }

    /// Each validated setting, given a bad value, fails with a message that names it.
    @Test(arguments: [
        ("COFFER_PORT", "eighty", "COFFER_PORT=eighty is not a number"), ("COFFER_PORT", "70000", "port 70000 is out of range"),
        ("COFFER_APP_APPLE_ID", "x", "COFFER_APP_APPLE_ID=x is not a number"), ("COFFER_TOKEN_TTL", "1", "token TTL must be 10–86400 seconds"),
        ("COFFER_UPLOAD_LIMIT", "0", "upload limit must be positive"), ("COFFER_LOG_LEVEL", "loud", "unknown log level loud"),
        ("COFFER_TRUSTED_PROXIES", "10.0.0.1,1.2.3", "trusted proxy 1.2.3 is not an IPv4 or IPv6 address"),
        ("COFFER_RATE_REDEMPTIONS", "-1", "rate-redemptions must be ≥ 0"), ("COFFER_RATE_REDEMPTION_BURST", "0", "rate-redemption-burst must be ≥ 1"),
        ("COFFER_RATE_AUTH_FAILURES", "-1", "rate-auth-failures must be ≥ 0"), ("COFFER_RATE_NOTIFICATIONS", "-1", "rate-notifications must be ≥ 0"),
        ("COFFER_RATE_NOTIFICATION_BURST", "0", "rate-notification-burst must be ≥ 1"),
        ("COFFER_DOWNLOAD_STALL_TIMEOUT", "3601", "download-stall-timeout must be 1–3600 seconds"),
        ("COFFER_DOWNLOADS_PER_ADDRESS", "-1", "downloads-per-address must be ≥ 0"),
        ("COFFER_BODY_BUDGET", "1000", "body-budget must be ≥ 8388608 bytes"),
        ("COFFER_ACCEL_REDIRECT", "/a/../", "accel-redirect must be a path like /_coffer/"),
        ("COFFER_CHECKPOINT_EVERY", "0", "checkpoint-every must be 1–1000000 entries"),
        ("COFFER_AUDIT_CONCURRENCY", "0", "audit-concurrency must be 1–1000 requests"),
        ("COFFER_EVENT_LOOPS", "0", "event-loops must be 1–256 threads"), ("COFFER_EVENT_LOOPS", "257", "event-loops must be 1–256 threads"),
        ("COFFER_CHECKPOINT_INTERVAL", "86401", "checkpoint-interval must be 1–86400 seconds"),
        ("COFFER_CONTENT_STORE", "/srv/content", "content-store must be s3://BUCKET[/PREFIX]"),
        ("COFFER_S3_ENDPOINT", "http://127.0.0.1:9000", "s3-endpoint is set but content-store is not"),
        ("COFFER_S3_PART_SIZE", "1024", "s3-part-size must be 5 MiB – 512 MiB"),
        ("COFFER_DOWNLOAD_MODE", "teleport", "download-mode must be stream, redirect or accel"),
        ("COFFER_DOWNLOAD_MODE", "redirect", "download-mode redirect needs an object store"),
        ("COFFER_DOWNLOAD_MODE", "accel", "download-mode accel needs --accel-redirect"),
        ("COFFER_LEGACY_RECEIPTS", "no", "legacy-receipts must be accept"),
    ])
    func badValuesNameTheirSetting(variable: String, value: String, message: String) async throws {
        let error = await #expect(throws: CofferConfigurationError.self) { try await Self.configuration(environment: [variable: value]) }
        #expect(error?.description.contains(message) == true, "\(String(describing: error))")
    }

    /// The audit limit: 4 on SQLite; on PostgreSQL at most half the pool's shared connections
    /// (one of the pool is the ledger writer's), at least 1; a value set stands.
    @Test func auditConcurrencyFollowsThePoolUnlessSet() async throws {
        let url = "postgres://coffer@127.0.0.1:5432/coffer"
        #expect(try await Self.configuration().auditConcurrency == 4)
        #expect(try await Self.configuration(environment: ["COFFER_DATABASE_POOL_SIZE": "3"]).auditConcurrency == 4, "SQLite: no pool")
        for (pool, expected) in [("10", 4), ("20", 4), ("7", 3), ("3", 1), ("1", 1)] {
            let read = try await Self.configuration(environment: ["COFFER_DATABASE_URL": url, "COFFER_DATABASE_POOL_SIZE": pool])
            #expect(read.auditConcurrency == expected, "pool \(pool)")
        }
        let set = try await Self.configuration(
            environment: ["COFFER_DATABASE_URL": url, "COFFER_DATABASE_POOL_SIZE": "3", "COFFER_AUDIT_CONCURRENCY": "6"])
        #expect(set.auditConcurrency == 6)
        #expect(try await Self.configuration(flags: [.auditConcurrency: .int(2)]).auditConcurrency == 2)
    }

    /// The object store and the download modes: accel-redirect alone still means accel (as
    /// before the mode existed); a prefix with another mode is a contradiction.
    @Test func contentStoreAndDownloadModes() async throws {
        let defaults = try await Self.configuration()
        #expect(defaults.contentStore == nil && defaults.downloadMode == .stream && defaults.s3Region == "us-east-1")
        #expect(defaults.s3PartSize == 16 * 1024 * 1024)
        let accel = try await Self.configuration(environment: ["COFFER_ACCEL_REDIRECT": "/_coffer/"])
        #expect(accel.downloadMode == .accel)
        let s3 = try await Self.configuration(
            environment: [
                "COFFER_CONTENT_STORE": "s3://assets/game", "COFFER_S3_ENDPOINT": "http://127.0.0.1:9000", "COFFER_S3_REGION": "auto",
                "COFFER_DOWNLOAD_MODE": "redirect", "COFFER_S3_PART_SIZE": "8388608",
            ])
        #expect(s3.contentStore == "s3://assets/game" && s3.s3Endpoint == "http://127.0.0.1:9000" && s3.s3Region == "auto")
        #expect(s3.downloadMode == .redirect && s3.s3PartSize == 8_388_608)
        await #expect(throws: CofferConfigurationError.self) {
            try await Self.configuration(environment: ["COFFER_ACCEL_REDIRECT": "/_coffer/", "COFFER_DOWNLOAD_MODE": "stream"])
        }
    }

    /// A config file is checked as a whole: a misspelt key, or a value of the wrong type, is an
    /// error naming the key, never skipped.
    @Test(arguments: [
        (#"{"bundleIds":["com.x"],"tokenTtl":60}"#, "unknown setting(s) tokenTtl"), (#"{"port":"9000"}"#, "port must be an integer"),
        (#"{"port":true}"#, "port must be an integer"), (#"{"tokenTTL":1.5}"#, "tokenTTL must be an integer"),
        (#"{"bundleIds":"com.x"}"#, "bundleIds must be an array of strings"), (#"{"host":{"name":"x"}}"#, "host must be a string"),
        (#"{"tokenKey":"c2VjcmV0"}"#, "unknown setting(s) tokenKey"), (#"["host"]"#, "the top level must be an object"),
        ("{", "is not a valid config file"),
    ])
    func badConfigFilesNameTheirKey(file: String, message: String) async throws {
        let error = await #expect(throws: CofferConfigurationError.self) { try await Self.configuration(file: file) }
        #expect(error?.description.contains(message) == true, "\(String(describing: error))")
    }

    /// `null` in the file stands for an absent key; an integral float is a number.
    @Test func configFileNullsAndIntegralNumbers() async throws {
        let read = try await Self.configuration(file: #"{"host":null,"port":9000.0}"#)
        #expect(read.host == "127.0.0.1" && read.port == 9000)
        await #expect(throws: CofferConfigurationError("cannot read /nonexistent/coffer.json")) {
            try await CofferConfiguration.reader(commandLine: Self.flags([:]), environment: ["COFFER_CONFIG": "/nonexistent/coffer.json"])
        }
    }

    /// `--config` beats `COFFER_CONFIG` like any flag.
    @Test func theConfigFlagBeatsItsVariable() async throws {
        try await withTemporaryDirectory(prefix: "coffer-config") { directory in
            let path = directory.appendingPathComponent("flag.json").path
            try Data(#"{"host":"from.flag.file"}"#.utf8).write(to: URL(fileURLWithPath: path))
            let reader = try await CofferConfiguration.reader(
                commandLine: Self.flags([.config: .string(path)]), environment: ["COFFER_CONFIG": "/nonexistent/coffer.json"])
            #expect(try await CofferConfiguration(reader: reader).host == "from.flag.file")
        }
    }

    /// Outside demo mode a bundle id is required; trust roots load only when resolved.
    @Test func resolvingTrustNeedsABundleId() async throws {
        var none = try await Self.configuration(environment: ["COFFER_ROOTS": "/nonexistent/root.pem"])
        #expect(throws: CofferConfigurationError.self) { try none.resolveTrustAnchors() }
        var missingRoot = try await Self.configuration(environment: ["COFFER_BUNDLE_IDS": "com.x", "COFFER_ROOTS": "/nonexistent/root.pem"])
        #expect(throws: CofferConfigurationError("cannot read /nonexistent/root.pem")) { try missingRoot.resolveTrustAnchors() }
        var apple = try await Self.configuration(environment: ["COFFER_BUNDLE_IDS": "com.x"])
        try apple.resolveTrustAnchors()
        #expect(apple.anchors.count == 2, "Apple's two built-in roots")
    }

    /// `buildApplication(reader:logger:)`: settings in, a serving application over the data directory out.
    @Test func buildApplicationFromAReader() async throws {
        try await withTemporaryDirectory(prefix: "coffer-config") { directory in
            let data = directory.appendingPathComponent("data").path
            let reader = try await CofferConfiguration.reader(
                commandLine: Self.flags([.dataDirectory: .string(data), .port: .int(0)]), environment: ["COFFER_BUNDLE_IDS": "com.x"])
            var logger = Logger(label: "coffer-test")
            logger.logLevel = .warning
            let app = try await buildApplication(reader: reader, logger: logger)
            try await app.test(.router) { client in
                try await client.execute(uri: "/healthz", method: .get) { #expect($0.status == .ok) }
            }
            #expect(FileManager.default.fileExists(atPath: DataDirectory(data).database))
            #expect(FileManager.default.fileExists(atPath: DataDirectory(data).tokenKeys))
            #expect(FileManager.default.fileExists(atPath: DataDirectory(data).ledgerKey))
        }
    }

    /// `--event-loops N`: the server runs on a group of its own with N loops, which is shut down
    /// with the server; without it, on NIO's shared group (one loop per core).
    @Test func eventLoopsGiveTheServerItsOwnGroup() async throws {
        try await withTemporaryDirectory(prefix: "coffer-loops") { directory in
            var logger = Logger(label: "coffer-test")
            logger.logLevel = .warning
            for loops in [1, 3] {
                let reader = try await CofferConfiguration.reader(
                    commandLine: Self.flags([
                        .dataDirectory: .string(directory.appendingPathComponent("data-\(loops)").path), .port: .int(0), .eventLoops: .int(loops),
                    ]),
                    environment: ["COFFER_BUNDLE_IDS": "com.x"])
                let app = try await buildApplication(reader: reader, logger: logger)
                let group = app.eventLoopGroup
                #expect(group !== MultiThreadedEventLoopGroup.singleton)
                // Each loop's thread, by its kernel id (its entry in /proc/self/task while it runs).
                var threads: [String] = []
                for loop in group.makeIterator() {
                    // "/proc/thread-self" links to "PID/task/TID".
                    let link = try await loop.submit { try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/thread-self") }.get()
                    threads.append(try #require(link.split(separator: "/").last.map(String.init)))
                }
                #expect(threads.count == loops && Set(threads).count == loops)
                for tid in threads { #expect(FileManager.default.fileExists(atPath: "/proc/self/task/\(tid)")) }
                try await app.test(.live) { client in
                    try await client.execute(uri: "/healthz", method: .get) { #expect($0.status == .ok) }
                }
                // Shut down with the server: NIO joins the threads before its shutdown returns;
                // the kernel drops their /proc entries when it reaps them, a moment later.
                func running() -> [String] { threads.filter { FileManager.default.fileExists(atPath: "/proc/self/task/\($0)") } }
                let deadline = ContinuousClock.now + .seconds(5)
                while !running().isEmpty && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
                #expect(running().isEmpty, "threads still running after the server stopped")
            }
            let reader = try await CofferConfiguration.reader(
                commandLine: Self.flags([.dataDirectory: .string(directory.appendingPathComponent("data").path), .port: .int(0)]),
                environment: ["COFFER_BUNDLE_IDS": "com.x"])
            let app = try await buildApplication(reader: reader, logger: logger)
            #expect(app.eventLoopGroup === MultiThreadedEventLoopGroup.singleton)
            try await app.test(.router) { client in
                try await client.execute(uri: "/healthz", method: .get) { #expect($0.status == .ok) }
            }
        }
    }

    /// Without a bundle id nothing is opened.
    @Test func buildApplicationRefusesNoBundleId() async throws {
        try await withTemporaryDirectory(prefix: "coffer-config") { directory in
            let data = directory.appendingPathComponent("data").path
            let reader = try await CofferConfiguration.reader(commandLine: Self.flags([.dataDirectory: .string(data)]), environment: [:])
            await #expect(throws: CofferConfigurationError.self) { _ = try await buildApplication(reader: reader, logger: Logger(label: "t")) }
            #expect(!FileManager.default.fileExists(atPath: data))
        }
    }
}
