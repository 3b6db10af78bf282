import Foundation
import Logging
import PostgresNIO

extension PostgresBackend {
    /// Key of the advisory lock that serialises migrations: instances starting together apply
    /// each migration once, the others wait and then find nothing to do.
    static let migrationLock: Int64 = 0x636f_6666_6d69_6772  // "coffmigr"

    /// Applies every embedded migration not yet recorded in `coffer_migrations`, each in the
    /// same transaction as its record; returns the names applied. Refuses a database that
    /// records a migration this binary does not know (migrated by a newer Coffer).
    @discardableResult
    public func migrate() async throws -> [String] {
        // An application role without CREATE on the schema starts fine once the owner migrated.
        guard try await !pendingMigrations().isEmpty else { return [] }
        return try await transaction { [self] connection in
            try await connection.checkedQuery("SELECT pg_advisory_xact_lock(\(Self.migrationLock))", logger: logger)
            try await connection.checkedQuery(
                "CREATE TABLE IF NOT EXISTS coffer_migrations (name text PRIMARY KEY, applied_at double precision NOT NULL)", logger: logger)
            let applied = try await Self.applied(connection, logger: logger)
            var done: [String] = []
            for migration in PostgresMigrations.all where !applied.contains(migration.name) {
                for statement in Self.statements(migration.sql) {
                    try await connection.checkedQuery(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await connection.checkedQuery(
                    "INSERT INTO coffer_migrations (name, applied_at) VALUES (\(migration.name), \(Date().timeIntervalSince1970))", logger: logger)
                done.append(migration.name)
            }
            return done
        }
    }

    /// Migrations this binary expects that the database lacks (read-only tools refuse such a
    /// database). Throws ``PostgresStoreError/unknownMigrations(_:)`` when the database records
    /// one this binary does not know — on every start, not only when something is pending: an
    /// older binary must not append to a schema a newer one changed.
    public func pendingMigrations() async throws -> [String] {
        try await read { [self] connection in
            let exists = try await connection.checkedQuery("SELECT to_regclass('coffer_migrations') IS NOT NULL", logger: logger).decode(Bool.self)
            var tableExists = false
            for try await value in exists { tableExists = value }
            guard tableExists else { return PostgresMigrations.all.map(\.name) }
            let applied = try await Self.applied(connection, logger: logger)
            return PostgresMigrations.all.map(\.name).filter { !applied.contains($0) }
        }
    }

    /// The migrations the database records; throws when one is unknown to this binary.
    private static func applied(_ connection: PostgresConnection, logger: Logger) async throws -> Set<String> {
        var applied: Set<String> = []
        for try await name in try await connection.checkedQuery("SELECT name FROM coffer_migrations", logger: logger).decode(String.self) {
            applied.insert(name)
        }
        let unknown = applied.subtracting(PostgresMigrations.all.map(\.name)).sorted()
        guard unknown.isEmpty else { throw PostgresStoreError.unknownMigrations(unknown) }
        return applied
    }

    /// The statements of a migration, one by one (the extended protocol takes one at a time): a
    /// statement ends at a line ending in `;` outside a `$$` body; comment-only lines are dropped.
    static func statements(_ sql: String) -> [String] {
        var statements: [String] = []
        var current: [Substring] = []
        var inBody = false
        for line in sql.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if current.isEmpty && (trimmed.isEmpty || trimmed.hasPrefix("--")) { continue }
            current.append(line)
            if line.components(separatedBy: "$$").count % 2 == 0 { inBody.toggle() }
            if !inBody && trimmed.hasSuffix(";") {
                statements.append(current.joined(separator: "\n"))
                current = []
            }
        }
        let rest = current.joined(separator: "\n").trimmingCharacters(in: .whitespacesAndNewlines)
        if !rest.isEmpty { statements.append(rest) }
        return statements
    }
}
