import CofferCore
import CofferStore
import Crypto
import Foundation
import Logging

/// Everything the server needs to know. Filled by `coffer serve` from flags, `COFFER_*`
/// environment variables and an optional config file (see the README's table).
public struct CofferConfiguration: Sendable {
    public var host = "127.0.0.1"
    public var port = 8080
    /// Holds coffer.sqlite, content/, keys/ (and sandbox/ in demo mode).
    public var dataDirectory = "coffer-data"
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

    public init() {}
}

/// The opened storage and domain services of one data directory.
public struct CofferServices: Sendable {
    public let configuration: CofferConfiguration
    public let database: CofferDatabase
    public let catalogue: CachedCatalogue
    public let ledger: SQLiteLedger
    public let ledgerSigner: LedgerSigner
    public let keys: SQLiteKeys
    public let adminLog: SQLiteAdminLog
    public let content: ContentStore
    public let vault: Vault
    public let metrics: CofferMetrics
    /// Uploads in progress (``CofferConfiguration/maxConcurrentUploads``).
    let uploads: Gate

    /// Opens (creating when needed) the data directory: database with migrations applied,
    /// content store with leftover temporary files removed, token keys.
    public static func open(_ configuration: CofferConfiguration, logger: Logger) async throws -> CofferServices {
        let fm = FileManager.default
        try fm.createDirectory(atPath: configuration.dataDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let database = try CofferDatabase(path: (configuration.dataDirectory as NSString).appendingPathComponent("coffer.sqlite"))
        let content = try ContentStore(root: (configuration.dataDirectory as NSString).appendingPathComponent("content"))
        let cleaned = try content.cleanTemporaryFiles()
        if cleaned > 0 { logger.warning("removed \(cleaned) partial upload(s) left by an earlier run") }
        let signer = try TokenKeyFile.signer(dataDirectory: configuration.dataDirectory, configured: configuration.tokenKeyBase64)
        let catalogue = CachedCatalogue(SQLiteCatalogue(database))
        let ledgerKey = try LedgerKeyFile.resolve(dataDirectory: configuration.dataDirectory, configured: configuration.ledgerKeyFile)
        if ledgerKey.insideDataDirectory {
            logger.notice(
                "the ledger signing key is in the data directory: whoever copies it can re-sign a rewritten ledger; keep it apart with --ledger-key",
                metadata: ["path": "\(ledgerKey.path)"])
        }
        let ledgerSigner = ledgerKey.signer
        let policy = CheckpointPolicy(signer: ledgerSigner, every: configuration.checkpointEvery)
        let ledger = SQLiteLedger(database, checkpoints: policy)
        // Start-up never chains a row it did not write: a row outside the chain is either from
        // an older Coffer (adopt it on purpose) or was inserted behind the server's back.
        let unchained = try await ledger.unchainedRows(limit: 10)
        if !unchained.isEmpty { throw LedgerStartupError.unchainedRows(unchained) }
        let altered = try await ledger.schemaProblems()
        if !altered.isEmpty { throw LedgerStartupError.schemaAltered(altered) }
        do { try await ledger.checkSeal(now: Date()) } catch let error as LedgerIntegrityError { throw LedgerStartupError.sealBroken(error) }
        let verifier = AppStoreVerifier(
            configuration: VerifierConfiguration(
                anchors: configuration.anchors, bundleIds: configuration.bundleIds, appAppleId: configuration.appAppleId))
        return CofferServices(
            configuration: configuration, database: database, catalogue: catalogue, ledger: ledger, ledgerSigner: ledgerSigner,
            keys: SQLiteKeys(database), adminLog: SQLiteAdminLog(database, checkpoints: policy),
            content: content,
            vault: Vault(verifier: verifier, catalogue: catalogue, ledger: ledger, tokens: signer, tokenTTL: configuration.tokenTTL),
            metrics: CofferMetrics(), uploads: Gate(capacity: configuration.maxConcurrentUploads))
    }
}

/// Why the server refused to open a data directory's ledger.
public enum LedgerStartupError: Error, CustomStringConvertible {
    /// Rows no ledger event chains (first few named).
    case unchainedRows([(kind: LedgerEventKind, row: Int64)])
    /// The chain does not end where this server's key sealed it.
    case sealBroken(LedgerIntegrityError)
    /// Append-only triggers or replay-rule unique indexes missing or altered.
    case schemaAltered([String])

    public var description: String {
        switch self {
        case .unchainedRows(let rows):
            let named = rows.map { "\($0.kind.rawValue) row \($0.row)" }.joined(separator: ", ")
            return """
                the ledger holds rows outside its hash chain (\(named)\(rows.count >= 10 ? ", …" : "")): they were inserted behind the \
                server's back, or come from a Coffer older than the chain (or, for adminAction rows, older than migration 0003). \
                The server will not chain rows it did not write. Check with `coffer ledger verify`; if you vouch for them, \
                chain them on purpose with `coffer ledger adopt --data-dir DIR` (recorded as a chained admin action).
                """
        case .sealBroken(let error):
            return """
                \(error). The server will not extend or sign a chain it did not seal: treat this as tampering until \
                shown otherwise. Check with `coffer ledger verify --public-key … --checkpoint …` (your saved \
                checkpoints). Only if you vouch for every entry as it stands, `coffer ledger adopt --reseal` seals it \
                and records the old seal and the re-sealed range in the chain, where auditors see it.
                """
        case .schemaAltered(let problems):
            return """
                the ledger's schema was altered (\(problems.joined(separator: "; "))): the append-only and replay \
                guarantees do not hold in this database. Restore it from a backup and check it with `coffer ledger verify`.
                """
        }
    }
}

/// The download-token keys in `DATA/keys/download-tokens.json` (0600), created on first start.
/// To rotate: add a key and make it active; older keys keep verifying until removed.
public enum TokenKeyFile {
    struct File: Codable {
        struct Entry: Codable {
            var id: String
            var secret: String
        }
        var active: String
        var keys: [Entry]
    }

    public struct KeyError: Error, CustomStringConvertible {
        public var description: String
    }

    public static func signer(dataDirectory: String, configured: String?) throws -> TokenSigner {
        if let configured {
            guard let bytes = Base64.decode(configured), bytes.count >= 32 else {
                throw KeyError(description: "the configured token key must be base64 of at least 32 bytes")
            }
            return TokenSigner(active: TokenKey(id: "cfg", key: SymmetricKey(data: bytes)))
        }
        let dir = (dataDirectory as NSString).appendingPathComponent("keys")
        let path = (dir as NSString).appendingPathComponent("download-tokens.json")
        let fm = FileManager.default
        if !fm.fileExists(atPath: path) {
            try fm.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            let secret = SymmetricKey(size: .bits256).withUnsafeBytes { Data($0).base64EncodedString() }
            let file = File(active: "k1", keys: [.init(id: "k1", secret: secret)])
            let data = try JSONEncoder().encode(file)
            guard fm.createFile(atPath: path, contents: data, attributes: [.posixPermissions: 0o600]) else {
                throw KeyError(description: "cannot create \(path)")
            }
        }
        guard let data = fm.contents(atPath: path), let file = try? JSONDecoder().decode(File.self, from: data) else {
            throw KeyError(description: "\(path) is not a token key file")
        }
        var keys: [TokenKey] = []
        for entry in file.keys {
            guard let bytes = Base64.decode(entry.secret), bytes.count >= 32, entry.id.utf8.allSatisfy({ $0 > 0x20 && $0 != 0x2E && $0 < 0x7F })
            else {
                throw KeyError(description: "\(path): key \(entry.id) must be base64 of at least 32 bytes, id without dots")
            }
            keys.append(TokenKey(id: entry.id, key: SymmetricKey(data: bytes)))
        }
        guard let active = keys.first(where: { $0.id == file.active }) else {
            throw KeyError(description: "\(path): active key \(file.active) is not listed")
        }
        return TokenSigner(active: active, retired: keys.filter { $0.id != file.active })
    }
}

/// The ledger checkpoint signing key in `DATA/keys/ledger-signing.key` (0600): base64 of a
/// raw Ed25519 private key, created on first start. Its public half is served at
/// `GET /v1/audit/public-key` and printed by `coffer ledger public-key`; auditors keep a copy
/// apart from the server.
public enum LedgerKeyFile {
    public static func path(dataDirectory: String) -> String {
        ((dataDirectory as NSString).appendingPathComponent("keys") as NSString).appendingPathComponent("ledger-signing.key")
    }

    /// Where the signing key was found.
    public struct Resolved: Sendable {
        public var signer: LedgerSigner
        public var path: String
        public var insideDataDirectory: Bool
    }

    /// The signing key the server uses: `configured` (`--ledger-key FILE`, which must exist),
    /// else systemd's `$CREDENTIALS_DIRECTORY/ledger-signing.key` when present, else the data
    /// directory's key (created on first start).
    public static func resolve(
        dataDirectory: String, configured: String?, environment: [String: String] = ProcessInfo.processInfo.environment, create: Bool = true
    ) throws -> Resolved {
        if let configured {
            return Resolved(signer: try load(configured), path: configured, insideDataDirectory: false)
        }
        if let credentials = environment["CREDENTIALS_DIRECTORY"] {
            let path = (credentials as NSString).appendingPathComponent("ledger-signing.key")
            if FileManager.default.fileExists(atPath: path) {
                return Resolved(signer: try load(path), path: path, insideDataDirectory: false)
            }
        }
        return Resolved(
            signer: try signer(dataDirectory: dataDirectory, create: create), path: path(dataDirectory: dataDirectory), insideDataDirectory: true)
    }

    /// Reads a key file (base64 of a raw Ed25519 private key).
    public static func load(_ path: String) throws -> LedgerSigner {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw TokenKeyFile.KeyError(description: "cannot read the ledger signing key \(path)")
        }
        guard let raw = Base64.decode(String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)),
            let key = try? Curve25519.Signing.PrivateKey(rawRepresentation: raw)
        else { throw TokenKeyFile.KeyError(description: "\(path) is not an Ed25519 key file (base64 of 32 bytes)") }
        return LedgerSigner(privateKey: key)
    }

    /// Writes a new key file (0600); refuses to overwrite one.
    public static func create(at path: String) throws -> LedgerSigner {
        let key = Curve25519.Signing.PrivateKey()
        guard !FileManager.default.fileExists(atPath: path) else { throw TokenKeyFile.KeyError(description: "\(path) exists: not overwritten") }
        guard
            FileManager.default.createFile(
                atPath: path, contents: Data((key.rawRepresentation.base64EncodedString() + "\n").utf8), attributes: [.posixPermissions: 0o600])
        else { throw TokenKeyFile.KeyError(description: "cannot create \(path)") }
        return LedgerSigner(privateKey: key)
    }

    /// Loads the key, creating it when `create` and it does not exist.
    public static func signer(dataDirectory: String, create: Bool = true) throws -> LedgerSigner {
        let path = path(dataDirectory: dataDirectory)
        if !FileManager.default.fileExists(atPath: path) {
            guard create else { throw TokenKeyFile.KeyError(description: "\(path) does not exist") }
            try FileManager.default.createDirectory(
                atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            return try self.create(at: path)
        }
        return try load(path)
    }
}
