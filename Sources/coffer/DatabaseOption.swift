import CofferApp
import CofferCore
import CofferPostgres
import CofferStore
import Foundation
import Logging

/// `--database URL` of the commands that work on a ledger: a PostgreSQL database shared by the
/// instances, instead of the data directory's SQLite file. A URL without a password takes
/// `PGPASSWORD` from the environment (so it stays out of shell history and process listings).
enum DatabaseOption {
    static let help =
        "PostgreSQL URL (postgres://USER@HOST:PORT/DB?sslmode=…) instead of the data directory's SQLite; the password may come from PGPASSWORD."

    static func url(_ text: String) throws -> PostgresURL {
        var url: PostgresURL
        do { url = try PostgresURL(text) } catch { throw UsageError("--database: \(error)") }
        if url.password == nil, let password = ProcessInfo.processInfo.environment["PGPASSWORD"], !password.isEmpty { url.password = password }
        // As `serve` warns: below verify-full, whoever sits between can answer the TLS request
        // with "no TLS" (prefer) or any certificate (require), then ask for the password in
        // clear — the owner's, for migrate and copy.
        if !url.isLocal && url.sslMode != .verifyFull {
            FileHandle.standardError.write(
                Data(
                    ("warning: the database is on another machine and sslmode is \(url.sslMode.rawValue): use sslmode=verify-full (and "
                        + "sslrootcert), or whoever sits between can read the password and alter the ledger\n").utf8))
        }
        return url
    }

    /// Applies pending migrations to `text`'s database; returns their names.
    static func migrate(_ text: String) async throws -> [String] {
        try await connect(text) { try await $0.migrate() }
    }

    /// Connects to `text` with a small pool, runs `body` (after checking the schema is current,
    /// or migrating it when `migrate`), and closes the pool whatever happens.
    static func with<T>(_ text: String, migrate: Bool = false, _ body: (PostgresBackend) async throws -> T) async throws -> T {
        try await connect(text) { backend in
            if migrate {
                try await backend.migrate()
            } else if let missing = try await backend.pendingMigrations().first {
                throw UsageError("the database lacks migration \(missing): run coffer migrate --database first")
            }
            return try await body(backend)
        }
    }

    private static func connect<T>(_ text: String, _ body: (PostgresBackend) async throws -> T) async throws -> T {
        let url = try url(text)
        var logger = Logger(label: "coffer")
        logger.logLevel = .warning
        let backend: PostgresBackend
        do { backend = try await PostgresBackend.open(url, poolSize: 3, timeouts: false, logger: logger) } catch {
            throw UsageError("cannot connect to \(url): \(error)")
        }
        do {
            let result = try await body(backend)
            await backend.close()
            return result
        } catch {
            await backend.close()
            throw error
        }
    }
}

/// Where a `keys` command writes: the key store and the admin log (chained and sealed with the
/// server's ledger key), in the data directory's SQLite or in `--database`.
/// Changes are logged in the chained admin log in their own transactions (`logging:`).
struct KeyStores {
    var keys: any KeyRepository
    /// The server's ledger key: it signs new keys (the server accepts no other).
    var signer: LedgerSigner

    /// Runs `body` over the key stores of `database` (when given) or of `dataDir`. The ledger key
    /// is never created here unless the ledger is a new SQLite one (a first `keys create` before
    /// the first `serve`): a stray key would sign what the server's key never saw. On PostgreSQL
    /// never: the instances may already run on the empty ledger with their own key (in their
    /// data directory or a systemd credential), and a key made here would seal the shared
    /// chain with another key, which every instance then refuses.
    static func with<T>(dataDir: String, ledgerKey: String?, database: String?, allowNew: Bool, _ body: (KeyStores) async throws -> T)
        async throws -> T
    {
        func signer(create: Bool) throws -> LedgerSigner {
            do { return try LedgerKeyFile.resolve(dataDirectory: dataDir, configured: ledgerKey, create: create).signer } catch {
                throw UsageError("\(error): key changes are chained and sealed with the server's ledger key; pass it with --ledger-key")
            }
        }
        guard let database else {
            let path = DataDirectory(dataDir).database
            let isNew = !FileManager.default.fileExists(atPath: path)
            // A new ledger is made here (keys create before the first serve); an existing one is
            // never migrated by a key command (a newer binary beside an older server).
            let db = isNew ? try CofferDatabase(path: path) : try IO.currentDatabase(path)
            let key = try signer(create: allowNew && isNew)
            return try await body(KeyStores(keys: SQLiteKeys(db, checkpoints: CheckpointPolicy(signer: key)), signer: key))
        }
        let key: LedgerSigner
        do { key = try LedgerKeyFile.resolve(dataDirectory: dataDir, configured: ledgerKey, create: false).signer } catch {
            throw UsageError(
                "\(error): on PostgreSQL, keys are signed with the instances' ledger key — pass it with --ledger-key (or the data directory "
                    + "holding it with --data-dir); none is made here")
        }
        return try await DatabaseOption.with(database) { backend in
            try await body(KeyStores(keys: PostgresKeys(backend, checkpoints: CheckpointPolicy(signer: key)), signer: key))
        }
    }
}
