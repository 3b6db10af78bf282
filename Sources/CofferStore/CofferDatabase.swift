import Foundation
import GRDB

/// The SQLite database file: a GRDB `DatabasePool` in WAL mode, migrated with ``EmbeddedMigrations``.
///
/// Every write commits with `PRAGMA synchronous = FULL`, so a committed row survives a power loss.
public final class CofferDatabase: Sendable {
    /// The connection pool (one writer, several readers).
    let pool: DatabasePool

    /// Opens (creating if needed) the database at `path` and applies the pending migrations.
    public convenience init(path: String) throws {
        var appliedNow: [String] = []
        try self.init(path: path, appliedNow: &appliedNow)
    }

    private init(path: String, appliedNow: inout [String]) throws {
        var config = Configuration()
        config.foreignKeysEnabled = true
        config.busyMode = .timeout(5)
        config.journalMode = .wal
        config.prepareDatabase { db in
            // Reset to NORMAL by DatabasePool's WAL setup on the writer; set again below.
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }
        let pool = try DatabasePool(path: path, configuration: config)
        // DatabasePool.setUpWALMode() runs after prepareDatabase and sets synchronous = NORMAL on
        // the writer. The writer connection is opened once and kept for the pool's lifetime.
        try pool.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }
        let migrator = Self.migrator()
        let before = try pool.read { db -> Set<String> in
            let known = Set(EmbeddedMigrations.all.map(\.name))
            let applied = try migrator.appliedIdentifiers(db)
            let unknown = applied.subtracting(known)
            guard unknown.isEmpty else { throw StoreError.unknownMigrations(unknown.sorted()) }
            return applied
        }
        try migrator.migrate(pool)
        appliedNow = try pool.read { db in try migrator.appliedMigrations(db).filter { !before.contains($0) } }
        self.pool = pool
    }

    /// Opens an existing database whose schema is exactly this binary's, for reading and
    /// writing, applying no migration (``StoreError/schemaOutdated(missing:)`` otherwise): for the
    /// tools that change a database a server uses (keys, content gc, ledger adopt), so that a
    /// newer binary never migrates a live database under an older server. `coffer migrate`
    /// (and `serve`) migrate, on purpose.
    public convenience init(currentPath path: String) throws {
        _ = try CofferDatabase(readOnlyPath: path)
        try self.init(path: path)
    }

    /// Opens an existing database for reading only: no migration runs, no write is possible
    /// (`SQLITE_OPEN_READONLY`), so auditing a database never changes it. Works while the
    /// server runs. Throws when the schema is not exactly the one this binary knows.
    public init(readOnlyPath path: String) throws {
        var config = Configuration()
        config.readonly = true
        config.busyMode = .timeout(5)
        let pool = try DatabasePool(path: path, configuration: config)
        try pool.read { db in
            let known = EmbeddedMigrations.all.map(\.name)
            let applied = try Self.migrator().appliedIdentifiers(db)
            let unknown = applied.subtracting(known)
            guard unknown.isEmpty else { throw StoreError.unknownMigrations(unknown.sorted()) }
            let missing = known.filter { !applied.contains($0) }
            guard missing.isEmpty else { throw StoreError.schemaOutdated(missing: missing) }
        }
        self.pool = pool
    }

    /// Writes a copy of the database as it is in one read transaction (SQLite's online backup)
    /// to a new file at `path`: a consistent snapshot, whatever writes the server makes meanwhile.
    public func backup(to path: String) throws {
        let target = try DatabaseQueue(path: path)
        try pool.backup(to: target)
        try target.close()
    }

    /// Copies the WAL into the database file and truncates it, then closes every connection.
    /// Call once, at shutdown, after the last request. (The pool's read-only readers cannot
    /// checkpoint when they close last, so the writer does it explicitly first.)
    public func close() throws {
        try pool.writeWithoutTransaction { db in _ = try db.checkpoint(.truncate) }
        try pool.close()
    }

    /// Opens (creating if needed) the database at `path`, applies the pending migrations and
    /// returns the names of the migrations applied by this call (empty when already up to date).
    public static func migrate(path: String) throws -> [String] {
        var applied: [String] = []
        _ = try CofferDatabase(path: path, appliedNow: &applied)
        return applied
    }

    /// Names of the migrations recorded in the database, in application order.
    public func appliedMigrations() throws -> [String] {
        try pool.read { db in try Self.migrator().appliedMigrations(db) }
    }

    /// `PRAGMA synchronous` of the writer connection (0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA).
    public func synchronousMode() throws -> Int {
        try pool.writeWithoutTransaction { db in
            guard let mode = try Int.fetchOne(db, sql: "PRAGMA synchronous") else {
                throw StoreError.invalidValue(column: "synchronous", value: "nil")
            }
            return mode
        }
    }

    /// `PRAGMA journal_mode` of the writer connection (`"wal"`).
    public func journalMode() throws -> String {
        try pool.writeWithoutTransaction { db in
            guard let mode = try String.fetchOne(db, sql: "PRAGMA journal_mode") else {
                throw StoreError.invalidValue(column: "journal_mode", value: "nil")
            }
            return mode
        }
    }

    /// Whether `PRAGMA foreign_keys` is on for the writer connection.
    public func foreignKeysEnabled() throws -> Bool {
        try pool.writeWithoutTransaction { db in
            try Bool.fetchOne(db, sql: "PRAGMA foreign_keys") ?? false
        }
    }

    /// Runs raw SQL on the writer (for tests and maintenance; never with input-derived SQL).
    func execute(sql: String) throws {
        try pool.write { db in try db.execute(sql: sql) }
    }

    /// Fetches one integer with raw SQL (for tests; never with input-derived SQL).
    func fetchInt(sql: String) throws -> Int? {
        try pool.read { db in try Int.fetchOne(db, sql: sql) }
    }

    /// The migrator built from ``EmbeddedMigrations``: one migration per SQL file, named by its stem.
    static func migrator() -> DatabaseMigrator {
        var migrator = DatabaseMigrator()
        for migration in EmbeddedMigrations.all {
            let sql = migration.sql
            migrator.registerMigration(migration.name) { db in
                try db.execute(sql: sql)
            }
        }
        return migrator
    }
}
