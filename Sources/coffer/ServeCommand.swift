import ArgumentParser
import CofferApp
import CofferCore
import CofferPostgres
import CofferSandbox
import CofferServer
import CofferStore
import Foundation
import Hummingbird
import Logging

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the Coffer HTTP server.",
        discussion: """
            Settings come from flags, then COFFER_* environment variables, then --config FILE (JSON), \
            then defaults (see the README's configuration table). Outside --demo at least one bundle id \
            is required: the server never starts in a mode that accepts any app's receipts.
            """)

    @Flag(help: "Demo mode: sandbox CA in DATA/sandbox trusted for LocalTesting only, demo catalogue loaded, keys printed.")
    var demo = false
    @Option(name: .customLong("data-dir"), help: "Data directory (database, content, keys). Default: coffer-data.") var dataDir: String?
    @Option(help: "Listen address. Default: 127.0.0.1.") var host: String?
    @Option(help: "Listen port. Default: 8080.") var port: Int?
    @Option(help: "JSON config file.") var config: String?
    @Option(name: .customLong("bundle-id"), help: "A bundle id whose purchases may be redeemed. Repeatable.") var bundleIds: [String] = []
    @Option(name: .customLong("app-apple-id"), help: "The app's Apple ID, checked where data carries one.") var appAppleId: Int?
    @OptionGroup var trust: TrustOptions
    @Option(name: .customLong("token-ttl"), help: "Download token lifetime in seconds. Default: 600.") var tokenTTL: Int?
    @Option(name: .customLong("upload-limit"), help: "Largest asset upload in bytes. Default: 536870912.") var uploadLimit: Int?
    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error, critical. Default: info.") var logLevel: String?
    @Option(name: .customLong("trusted-proxy"), help: "IP address of a reverse proxy whose X-Forwarded-For is believed. Repeatable.")
    var trustedProxies: [String] = []
    @Option(name: .customLong("rate-redemptions"), help: "Redemption requests per client address per minute (0: unlimited). Default: 600.")
    var rateRedemptions: Int?
    @Option(name: .customLong("rate-redemption-burst"), help: "…of which this many at once. Default: 200.") var rateRedemptionBurst: Int?
    @Option(name: .customLong("rate-auth-failures"), help: "Failed authentications per address per minute before 429 (0: unlimited). Default: 20.")
    var rateAuthFailures: Int?
    @Option(
        name: .customLong("rate-recorded-refusals"),
        help:
            "Refusals of proofs that did not verify recorded in the ledger per client address per hour; beyond them they are counted, not written (0: every refusal, also of verified purchases, whose own budget is 600 an hour). Default: 120."
    )
    var rateRecordedRefusals: Int?
    @Option(name: .customLong("rate-notifications"), help: "Notifications per client address per minute (0: unlimited). Default: 600.")
    var rateNotifications: Int?
    @Option(name: .customLong("rate-notification-burst"), help: "…of which this many at once. Default: 600.") var rateNotificationBurst: Int?
    @Option(name: .customLong("download-stall-timeout"), help: "Close a download that makes no progress for S seconds (1–3600). Default: 30.")
    var downloadStallTimeout: Int?
    @Option(name: .customLong("downloads-per-address"), help: "Downloads in progress per client address (0: unlimited). Default: 16.")
    var downloadsPerAddress: Int?
    @Option(name: .customLong("body-budget"), help: "Request-body bytes held at once by the server, then 503 busy (≥ 8388608). Default: 67108864.")
    var bodyBudget: Int?
    @Option(name: .customLong("accel-redirect"), help: "X-Accel-Redirect prefix: nginx sends the bytes (see deploy/). Default: off.")
    var accelRedirect: String?
    @Option(name: .customLong("checkpoint-every"), help: "Sign a ledger checkpoint every N entries. Default: 1000.") var checkpointEvery: Int?
    @Option(name: .customLong("checkpoint-interval"), help: "…and every S seconds when the ledger grew. Default: 60.")
    var checkpointInterval: Int?
    @Option(
        name: .customLong("ledger-key"),
        help:
            "Ledger checkpoint signing key file kept outside the data directory (coffer ledger keygen). Default: $CREDENTIALS_DIRECTORY/ledger-signing.key when present, else DATA/keys/ledger-signing.key."
    )
    var ledgerKey: String?
    @Option(
        help:
            "PostgreSQL URL postgres://USER[:PASS]@HOST[:PORT]/DB[?sslmode=…] shared by several instances (prefer COFFER_DATABASE_URL: a password on the command line shows in process listings). Default: SQLite in the data directory."
    )
    var database: String?
    @Option(
        name: .customLong("database-pool-size"),
        help: "Connections to PostgreSQL per instance at most, the ledger writer's own one included (2 at least). Default: 10.")
    var databasePoolSize: Int?
    @Option(
        name: .customLong("audit-concurrency"),
        help:
            "/v1/audit requests reading the database at once on this instance (an export while it reads a page), then 503 auditBusy (1–1000). Default: 4 (PostgreSQL: at most half the pool)."
    )
    var auditConcurrency: Int?
    @Option(
        name: .customLong("event-loops"),
        help:
            "HTTP event-loop threads (1–256). Several instances on one host: give each its share of the cores. Default: one per core."
    )
    var eventLoops: Int?
    @Option(
        name: .customLong("content-store"),
        help:
            "Where asset bytes live: s3://BUCKET[/PREFIX], an S3-compatible bucket several instances share (credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN). Default: DATA/content/."
    )
    var contentStore: String?
    @Option(name: .customLong("s3-endpoint"), help: "S3 endpoint URL for MinIO, R2, Ceph… (path-style requests). Default: AWS.")
    var s3Endpoint: String?
    @Option(name: .customLong("s3-region"), help: "The bucket's region (R2: auto). Default: us-east-1.") var s3Region: String?
    @Option(name: .customLong("s3-part-size"), help: "Multipart upload part size in bytes (5 MiB–512 MiB). Default: 16777216.") var s3PartSize: Int?
    @Option(
        name: .customLong("content-cache-size"),
        help:
            "Bytes of the bucket's objects kept in DATA/cache and streamed as local files (stream mode only; 0: no cache). Default: 1073741824."
    )
    var contentCacheSize: Int?
    @Option(
        name: .customLong("download-mode"),
        help:
            "stream (Coffer sends the bytes), redirect (302 to a presigned URL of the bucket, ≤ 60 s) or accel (nginx, with --accel-redirect). Default: stream (accel when --accel-redirect is set)."
    )
    var downloadMode: String?
    @Option(
        name: .customLong("player-key"),
        help:
            "The game login service's public key for player tokens: a PEM file (P-256 for ES256, Ed25519 for EdDSA) or a JWKS file; repeat for rotation. With --player-issuer and --player-audience, redemptions need Authorization: Bearer <player token>."
    )
    var playerKeys: [String] = []
    @Option(name: .customLong("player-issuer"), help: "The iss player tokens must carry.") var playerIssuer: String?
    @Option(name: .customLong("player-audience"), help: "The aud player tokens must carry.") var playerAudience: String?
    @Option(
        name: .customLong("player-account-claim"),
        help: "The player token claim (a UUID) a purchase's signed appAccountToken must equal. Default: sub.")
    var playerAccountClaim: String?
    @Option(
        name: .customLong("partial-refunds"),
        help: "revoke (any refund revokes the purchase) or keep (a prorated refund is recorded, only a full refund revokes). Default: revoke.")
    var partialRefunds: String?
    @Option(
        name: .customLong("legacy-receipts"),
        help:
            "accept (legacy app receipts are redeemed) or refuse (StoreKit 2 signed transactions only: a receipt carries no signed appAccountToken or ownership type). Default: accept."
    )
    var legacyReceipts: String?
    @Option(help: "Demo catalogue directory.") var content = "content"
    @Flag(name: .customLong("print-config"), help: "Print the resolved configuration as JSON and exit (secrets omitted).")
    var printConfig = false

    func run() async throws {
        let reader = try await CofferConfiguration.reader(commandLine: commandLine, environment: ProcessInfo.processInfo.environment)
        var configuration = try await CofferConfiguration(reader: reader)
        if printConfig { return try printResolved(configuration) }
        try PortCheck.ensureFree(host: configuration.host, port: configuration.port)

        var logger = Logger(label: "coffer")
        logger.logLevel = configuration.logLevel
        for line in try await CofferConfiguration.overridden(commandLine: commandLine, environment: ProcessInfo.processInfo.environment) {
            logger.warning("\(line)")
        }
        guard demo else { return try await Self.serve(try await buildApplication(reader: reader, logger: logger), logger: logger) }

        let ca = try Demo.sandbox(at: DataDirectory(configuration.dataDirectory).sandbox)
        configuration.anchors = [try TrustAnchor.cofferSandbox(ca.rootDER)]
        if configuration.bundleIds.isEmpty { configuration.bundleIds = [Demo.bundleId] }
        let app = try await buildApplication(configuration, logger: logger) { storage in
            try await Demo.prepare(storage, contentDirectory: content, logger: logger)
        }
        try await Self.serve(app, logger: logger)
    }

    static func serve(_ app: some ApplicationProtocol, logger: Logger) async throws {
        do { try await app.runService() } catch {
            await shutDownEventLoops(of: app, logger: logger)
            throw error
        }
        await shutDownEventLoops(of: app, logger: logger)
        logger.info("Coffer stopped")
    }
}

extension ServeCommand {
    /// What `--print-config` shows: the settings after flags, environment and file were merged.
    struct Resolved: Encodable {
        var host: String
        var port: Int
        var dataDirectory: String
        var bundleIds: [String]
        var appAppleId: Int64?
        var roots: [String]
        var environments: [String]
        var tokenTTL: Int
        var uploadLimit: Int64
        var logLevel: String
        var trustedProxies: [String]
        var checkpointEvery: Int64
        var checkpointInterval: Int64
        var rateRedemptions: Int
        var rateRedemptionBurst: Int
        var rateAuthFailures: Int
        var rateRecordedRefusals: Int
        var rateNotifications: Int
        var rateNotificationBurst: Int
        var downloadStallTimeout: Int64
        var downloadsPerAddress: Int
        var bodyBudget: Int
        var accelRedirect: String?
        var ledgerKey: String?
        /// The database URL with its password replaced by `***`.
        var database: String?
        var databasePoolSize: Int
        var auditConcurrency: Int
        var eventLoops: Int?
        var contentStore: String?
        var s3Endpoint: String?
        var s3Region: String
        var s3PartSize: Int
        var contentCacheSize: Int
        var downloadMode: String
        var playerKeys: [String]
        var playerIssuer: String?
        var playerAudience: String?
        var playerAccountClaim: String
        var partialRefunds: String
        var legacyReceipts: String
        var tokenKeyFromEnvironment: Bool
        var demo: Bool
    }

    /// `endpoint` with any user and password in it replaced by `***` (the server refuses such
    /// an endpoint, but --print-config shows the settings before that check): anything between
    /// the scheme (a "://" before the first "@"; none: the start) and the last "@", whether or
    /// not it parses as user info (a password with a space, "/" or "#" does not). An "@" in the
    /// path hides the host too: the safe side, for a setting only printed. No "@", no user info.
    static func withoutUserInfo(_ endpoint: String) -> String {
        guard let at = endpoint.lastIndex(of: "@"), let first = endpoint.firstIndex(of: "@") else { return endpoint }
        let scheme = endpoint.range(of: "://").flatMap { $0.lowerBound < first ? $0.upperBound : nil }
        return String(endpoint[..<(scheme ?? endpoint.startIndex)]) + "***" + String(endpoint[at...])
    }

    func printResolved(_ c: CofferConfiguration) throws {
        let resolved = Resolved(
            host: c.host, port: c.port, dataDirectory: c.dataDirectory, bundleIds: c.bundleIds.sorted(), appAppleId: c.appAppleId, roots: c.roots,
            environments: c.environments, tokenTTL: Int(c.tokenTTL), uploadLimit: c.uploadLimit, logLevel: c.logLevel.rawValue,
            trustedProxies: c.trustedProxies.sorted(), checkpointEvery: c.checkpointEvery, checkpointInterval: c.checkpointIntervalSeconds,
            rateRedemptions: c.redemptionsPerMinute, rateRedemptionBurst: c.redemptionBurst, rateAuthFailures: c.authFailuresPerMinute,
            rateRecordedRefusals: c.recordedRefusalsPerHour,
            rateNotifications: c.notificationsPerMinute, rateNotificationBurst: c.notificationBurst,
            downloadStallTimeout: c.downloadStallTimeoutSeconds, downloadsPerAddress: c.maxDownloadsPerAddress, bodyBudget: c.bodyBudgetBytes,
            accelRedirect: c.accelRedirectPrefix, ledgerKey: c.ledgerKeyFile, database: try c.databaseURL.map { try PostgresURL($0).description },
            databasePoolSize: c.databasePoolSize, auditConcurrency: c.auditConcurrency, eventLoops: c.eventLoops,
            contentStore: c.contentStore, s3Endpoint: c.s3Endpoint.map(Self.withoutUserInfo),
            s3Region: c.s3Region,
            s3PartSize: c.s3PartSize, contentCacheSize: c.contentCacheSize, downloadMode: c.downloadMode.rawValue, playerKeys: c.playerKeyFiles,
            playerIssuer: c.playerIssuer,
            playerAudience: c.playerAudience, playerAccountClaim: c.playerAccountClaim,
            partialRefunds: c.refundPolicy == .revokeAny ? "revoke" : "keep", legacyReceipts: c.legacyReceipts.rawValue,
            tokenKeyFromEnvironment: c.tokenKeyBase64 != nil, demo: demo)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        print(String(decoding: try encoder.encode(Self.effective(resolved, demo: demo)), as: UTF8.self))
    }

    /// The settings as resolved (every key present, null when off), plus `effective`: what the
    /// server will actually use where a setting is left to its default — the trust roots and
    /// environments spelled out, storage and paths absolute.
    static func effective(_ r: Resolved, demo: Bool) -> [String: JSONValue] {
        var out: [String: JSONValue] = [:]
        if let data = try? JSONEncoder().encode(r), case .object(let object)? = try? JSONDecoder().decode(JSONValue.self, from: data) {
            out = object
        }
        for key in ["appAppleId", "accelRedirect", "ledgerKey", "database", "contentStore", "s3Endpoint", "playerIssuer", "playerAudience"]
        where out[key] == nil {
            out[key] = .null
        }
        let data = URL(fileURLWithPath: r.dataDirectory).standardizedFileURL.path
        let directory = DataDirectory(data)
        var effective: [String: JSONValue] = ["dataDirectory": .string(data)]
        effective["bundleIds"] = .array((r.bundleIds.isEmpty && demo ? [Demo.bundleId] : r.bundleIds).map(JSONValue.string))
        effective["roots"] =
            r.roots.isEmpty
            ? .array([
                .string(
                    demo
                        ? "\(directory.sandbox.path)/root.pem (the demo's sandbox CA, LocalTesting only)"
                        : "built in: Apple Root CA, Apple Root CA - G3 (Production)")
            ]) : .array(r.roots.map(JSONValue.string))
        effective["environments"] = .array(
            (r.environments.isEmpty ? [demo ? "LocalTesting" : "Production"] : r.environments).map(JSONValue.string))
        effective["database"] = .string(r.database ?? "SQLite: \(directory.database)")
        effective["contentStore"] = .string(r.contentStore ?? "local: \(directory.content)")
        effective["contentCache"] = .string(
            r.contentStore == nil
                ? "none (local content)"
                : r.downloadMode != "stream"
                    ? "none (\(r.downloadMode) mode: the store or nginx sends the bytes)"
                    : r.contentCacheSize == 0 ? "none (content-cache-size 0)" : "\(directory.cache), at most \(r.contentCacheSize) bytes")
        let credentials = ProcessInfo.processInfo.environment["CREDENTIALS_DIRECTORY"].map(DataDirectory.ledgerKey(inCredentials:))
        effective["ledgerKey"] = .string(
            r.ledgerKey ?? credentials.flatMap { FileManager.default.fileExists(atPath: $0) ? $0 : nil } ?? directory.ledgerKey)
        out["effective"] = .object(effective)
        return out
    }
}

struct MigrateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate", abstract: "Apply pending database migrations (the server also does at start).")

    @Option(name: .customLong("data-dir"), help: "Data directory.") var dataDir = "coffer-data"

    @Option(help: ArgumentHelp(DatabaseOption.help)) var database: String?

    func run() async throws {
        let applied: [String]
        if let database {
            applied = try await DatabaseOption.migrate(database)
        } else {
            try FileManager.default.createDirectory(atPath: dataDir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            applied = try CofferDatabase.migrate(path: DataDirectory(dataDir).database)
        }
        print(applied.isEmpty ? "database is up to date" : "applied: \(applied.joined(separator: ", "))")
    }
}

struct KeysCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keys", abstract: "Manage admin and auditor API keys.", subcommands: [Create.self, Revoke.self, Adopt.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a key; prints only the key (shown once, stored hashed). Works while the server runs.")
        @Option(name: .customLong("data-dir"), help: "Data directory.") var dataDir = "coffer-data"
        @Option(help: "admin or auditor.") var role: String
        @Option(help: "Who the key is for (appears in logs).") var name: String
        @Option(name: .customLong("ledger-key"), help: "The ledger signing key file, when it lives outside the data directory.")
        var ledgerKey: String?
        @Option(help: ArgumentHelp(DatabaseOption.help)) var database: String?

        func run() async throws {
            guard let role = Role(rawValue: role) else { throw UsageError("--role must be admin or auditor") }
            guard (1...128).contains(name.utf8.count) else { throw UsageError("--name must be 1–128 characters") }
            let secret = try await KeyStores.with(dataDir: dataDir, ledgerKey: ledgerKey, database: database, allowNew: true) { stores in
                // The chained entry names the key by id too (names are not unique); it is stored with
                // the key, so there is never a live key the admin log does not show.
                try await APIKeys.issue(
                    role: role, name: name, in: stores.keys, signer: stores.signer, now: Date(),
                    logging: { KeysCommand.localAction(.keyCreate, target: name, detail: "\(role.rawValue) key \($0.keyId)") }
                ).secret
            }
            print(secret)
        }
    }

    struct Adopt: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the live keys the ledger key did not sign; --sign KEY_ID signs the ones you name.",
            discussion: """
                The server accepts only keys the ledger key signed. Keys made by a Coffer from before \
                that are refused until signed: check the list (names, roles, creation times), then \
                sign exactly the keys you recognise, by id (--sign ID, repeated). A key you do not \
                recognise was written into the database by someone else: revoke it \
                (coffer keys revoke --key-id ID). Each key signed is recorded in the chained admin log.
                """)
        @Option(name: .customLong("data-dir"), help: "Data directory.") var dataDir = "coffer-data"
        @Option(name: .customLong("sign"), help: "The id of a listed unsigned key to sign (repeat for several).") var sign: [String] = []
        @Option(name: .customLong("ledger-key"), help: "The ledger signing key file, when it lives outside the data directory.")
        var ledgerKey: String?
        @Option(help: ArgumentHelp(DatabaseOption.help)) var database: String?

        func run() async throws {
            try await KeyStores.with(dataDir: dataDir, ledgerKey: ledgerKey, database: database, allowNew: false) { stores in
                let publicKey = stores.signer.publicKey
                let refused = try await stores.keys.live().filter { !$0.isAuthentic(signedBy: publicKey) }
                func describe(_ key: APIKey) -> String {
                    "\(key.role.rawValue) key '\(LedgerText.escaped(key.name, maxBytes: 256))' (id \(LedgerText.escaped(key.keyId, maxBytes: 256)), created \(RFC3339.format(key.createdAt)))"
                }
                guard !sign.isEmpty else {
                    guard !refused.isEmpty else { return print("every live key is signed by the ledger key") }
                    for key in refused {
                        print(
                            key.signature == nil
                                ? "unsigned: \(describe(key))"
                                : "signature invalid (re-issue it, then revoke this one): \(describe(key))")
                    }
                    print("sign the keys you recognise: coffer keys adopt --sign ID …; revoke the others: coffer keys revoke --key-id ID")
                    return
                }
                // Only keys named here, each still unsigned now: a row added since the list was read
                // is never signed by accident.
                let byId = Dictionary(refused.map { ($0.keyId, $0) }, uniquingKeysWith: { first, _ in first })
                var ids: [String] = []
                for id in sign where !ids.contains(id) { ids.append(id) }
                let problems = ids.compactMap { id -> String? in
                    guard let key = byId[id] else { return "\(id): not a live key the ledger key did not sign (signed already, revoked, or unknown)" }
                    return key.signature == nil ? nil : "\(id): its signature is invalid — re-issue the key and revoke this one"
                }
                guard problems.isEmpty else { throw UsageError("nothing signed: \(problems.joined(separator: "; "))") }
                for id in ids {
                    guard let key = byId[id] else { continue }
                    var signed = key
                    signed.signature = try stores.signer.signed(key).signature
                    // The signature covers the creation time to the millisecond, as stored.
                    guard let signature = signed.signature, signed.isAuthentic(signedBy: publicKey) else {
                        throw UsageError("could not sign \(describe(key))")
                    }
                    let entry = KeysCommand.localAction(
                        .keyCreate, target: key.name,
                        detail: "\(key.role.rawValue) key \(key.keyId), made before keys were signed: signed by keys adopt")
                    guard try await stores.keys.sign(keyId: key.keyId, signature: signature, logging: entry) else {
                        throw UsageError("\(describe(key)) was changed meanwhile: not signed")
                    }
                    print("signed: \(describe(key))")
                }
            }
        }
    }

    /// An admin-log entry for a key change made on the server's machine.
    static func localAction(_ action: AdminActionName, target: String, detail: String) -> AdminAction {
        AdminAction(
            at: Date(), keyId: "cli", keyName: "local user \(ProcessInfo.processInfo.userName)", action: action, target: target, detail: detail,
            clientAddress: "local")
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Revoke a key: the key itself, read from stdin (or --key), or its id (--key-id).",
            discussion: """
                Reads the key from the first line of standard input, so it stays out of shell history \
                and process listings: `coffer keys revoke --data-dir D < key.txt`, or paste it at the \
                prompt. --key K still works but exposes K to both. --key-id ID revokes a key whose \
                secret you do not have (one `coffer keys adopt` lists, or the admin log names).
                """)
        @Option(name: .customLong("data-dir"), help: "Data directory.") var dataDir = "coffer-data"
        @Option(help: "The key to revoke (prefer stdin: a key on the command line lands in shell history and ps).") var key: String?
        @Option(
            name: .customLong("key-id"),
            help: "Revoke the key with this id instead (from the admin log or `coffer keys adopt`): for a key whose secret you do not have.")
        var keyId: String?
        @Option(name: .customLong("ledger-key"), help: "The ledger signing key file, when it lives outside the data directory.")
        var ledgerKey: String?
        @Option(help: ArgumentHelp(DatabaseOption.help)) var database: String?

        func run() async throws {
            guard keyId == nil || key == nil else { throw UsageError("give the key or --key-id, not both") }
            var secret: String?
            if let key {
                secret = key
            } else if keyId == nil {
                if isatty(STDIN_FILENO) == 1 { FileHandle.standardError.write(Data("key to revoke: ".utf8)) }
                secret = try Self.readKey(from: FileHandle.standardInput)
            }
            let found = try await KeyStores.with(dataDir: dataDir, ledgerKey: ledgerKey, database: database, allowNew: false) { stores -> APIKey? in
                let live: APIKey?
                if let secret {
                    live = try await stores.keys.key(secretHash: APIKeys.hash(secret))
                } else {
                    live = try await stores.keys.live().first { $0.keyId == keyId }
                }
                guard let found = live else { return nil }
                let entry = KeysCommand.localAction(.keyRevoke, target: found.name, detail: "\(found.role.rawValue) key \(found.keyId)")
                guard try await stores.keys.revoke(keyId: found.keyId, at: entry.at, logging: entry) else { return nil }
                return found
            }
            guard let found else {
                print("no live key matches")
                throw ExitCode(1)
            }
            print("revoked \(found.role.rawValue) key '\(LedgerText.escaped(found.name, maxBytes: 256))'")
        }

        /// The key on the first line of `input` (surrounding whitespace removed; at most 4 KiB read).
        static func readKey(from input: FileHandle) throws -> String {
            var bytes: [UInt8] = []
            while bytes.count < 4096, !bytes.contains(UInt8(ascii: "\n")) {
                guard let chunk = try input.read(upToCount: 4096 - bytes.count), !chunk.isEmpty else { break }
                bytes += chunk
            }
            let line = bytes.split(separator: UInt8(ascii: "\n"), maxSplits: 1, omittingEmptySubsequences: false).first ?? []
            let key = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            guard !key.isEmpty else { throw UsageError("no key on standard input (pipe the key in, or pass --key)") }
            return key
        }
    }
}
