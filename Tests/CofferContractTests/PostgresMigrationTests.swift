import CofferTestSupport
import Foundation
import Logging
import Testing

@testable import CofferPostgres

/// The embedded PostgreSQL migrations are the files of `migrations/postgres/`, byte for byte,
/// and each splits into the statements it holds.
@Suite struct PostgresMigrationTests {
    static var directory: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("migrations/postgres")
    }

    @Test func embeddedMatchFiles() throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.directory.path).filter { $0.hasSuffix(".sql") }.sorted()
        #expect(files.map { String($0.dropLast(4)) } == PostgresMigrations.all.map(\.name))
        for (file, migration) in zip(files, PostgresMigrations.all) {
            let text = try String(contentsOf: Self.directory.appendingPathComponent(file), encoding: .utf8)
            #expect(text == migration.sql, "\(file) differs from its embedded copy")
        }
    }

    @Test func statementsSplitOutsideFunctionBodies() {
        let statements = PostgresBackend.statements(
            "-- a comment\nCREATE TABLE a (x int);\n\nCREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $$\nBEGIN\n    RAISE EXCEPTION 'no';\nEND\n$$;\nCREATE TRIGGER t BEFORE UPDATE ON a FOR EACH ROW EXECUTE FUNCTION f();\n"
        )
        #expect(statements.count == 3)
        #expect(statements[1].hasPrefix("CREATE FUNCTION") && statements[1].hasSuffix("$$;"))
        #expect(PostgresBackend.statements(PostgresMigrations.all[0].sql).count > 20)
    }

    /// A database in another encoding than UTF8 is refused when it is opened (the server, `coffer
    /// migrate`, every tool), saying how to make one that works, before anything is written.
    @Test(arguments: ["LATIN1", "SQL_ASCII"]) func aDatabaseNotInUTF8IsRefusedWhenOpened(encoding: String) async throws {
        let cluster = try await PostgresCluster.shared()
        let name = "coffer_\(encoding.lowercased())_\(UUID().uuidString.prefix(8).lowercased())"
        _ = try await cluster.psql("CREATE DATABASE \(name) ENCODING '\(encoding)' TEMPLATE template0")
        do {
            let backend = try await PostgresBackend.open(
                try PostgresURL(cluster.url(database: name)), poolSize: 1, timeouts: false, logger: Logger(label: "encoding"))
            await backend.close()
            Issue.record("a \(encoding) database was opened")
        } catch {
            #expect("\(error)".contains("the database's encoding is \(encoding), not UTF8"), "\(error)")
        }
        #expect(try await cluster.psql("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", database: name) == "0", "nothing written")
        _ = try? await cluster.psql("DROP DATABASE \(name)")
        #expect(PostgresBackend.encodingProblem("UTF8") == nil)
    }
}

/// Migration 0002 on a database that 0001 alone migrated and an older Coffer filled: its rows
/// keep their numbers, new ones continue after the largest, and a row inserted without a
/// number is refused (no identity default is left to hand out one the writer also uses).
@Suite("PostgreSQL migration 0002 over a filled 0001 database")
struct PostgresUpgradeTests {
    @Test func rowsNumberedUnderTheLockContinueAfterTheOldOnes() async throws {
        let cluster = try await PostgresCluster.shared()
        let url = try await cluster.createDatabase()
        let name = String(try #require(URLComponents(string: url)).path.dropFirst())
        let first = try #require(PostgresMigrations.all.first)
        #expect(first.name == "0001_initial")
        try await cluster.psql(first.sql, database: name)
        try await cluster.psql(
            """
            CREATE TABLE coffer_migrations (name text PRIMARY KEY, applied_at double precision NOT NULL);
            INSERT INTO coffer_migrations VALUES ('0001_initial', 0);
            INSERT INTO attempts (at, code, detail, receipt_sha256, client_address) VALUES (0, 'c', 'd', 'x', 'a'), (0, 'c', 'd', 'x', 'a');
            INSERT INTO api_keys VALUES ('old', 'old admin', 'admin', '\(fakeHash("old"))', 0, NULL);
            """, database: name)
        #expect(try await cluster.psql("SELECT max(sequence) FROM attempts", database: name) == "2")

        let backend = try await PostgresBackend.open(try PostgresURL(url), poolSize: 2, timeouts: false, logger: Logger(label: "upgrade"))
        do {
            #expect(
                try await backend.migrate() == [
                    "0002_chain_lock", "0003_players", "0004_append_commit", "0005_flush_after_unlock", "0006_flush_checked",
                    "0007_signed_api_keys", "0008_admin_events_index", "0009_content_pins",
                ])
            #expect(try await backend.pendingMigrations().isEmpty)
            // 0007: the key made before keys were signed has no signature (the server refuses it until
            // `keys adopt --sign`); from now on a key changes only by one revocation or one
            // signature, and is never deleted (the owner included).
            let keys = PostgresKeys(backend)
            #expect(try await keys.live().map(\.keyId) == ["old"])
            #expect(try await keys.live().first?.signature == nil)
            // Refused by the guard itself (its message), not by anything else.
            func refused(_ statement: String, _ message: String) async {
                do {
                    try await cluster.psql(statement, database: name)
                    Issue.record("not refused: \(statement)")
                } catch {
                    #expect("\(error)".contains(message), "\(statement): \(error)")
                }
            }
            let changes = "changes only by being revoked once, or signed once"
            for statement in [
                "UPDATE api_keys SET role = 'auditor'", "UPDATE api_keys SET revoked_at = 'NaN'", "UPDATE api_keys SET revoked_at = 1e13",
                "UPDATE api_keys SET revoked_at = 5, signature = 'x'",
            ] {
                await refused(statement, changes)
            }
            await refused("DELETE FROM api_keys", "never deleted")
            await refused("TRUNCATE api_keys", "append-only")
            #expect(try await keys.sign(keyId: "old", signature: "first"))
            #expect(try await !keys.sign(keyId: "old", signature: "second"), "signed once")
            await refused("UPDATE api_keys SET signature = 'second'", changes)
            #expect(try await keys.revoke(keyId: "old", at: instant(5)))
            #expect(try await keys.live().isEmpty)
            await refused("UPDATE api_keys SET revoked_at = NULL", changes)
            await refused("UPDATE api_keys SET revoked_at = 6", changes)
            let old = try #require(try await keys.key(secretHash: fakeHash("old")))
            #expect(old.revokedAt == instant(5) && old.signature == "first" && old.role == .admin)
            let ledger = PostgresLedger(backend, checkpoints: nil)
            try await ledger.record(makeAttempt(code: "late", transactionId: "1"))
            #expect(try await ledger.insert(makeRedemption("1")).inserted?.sequence == 1)
            await ledger.finishWrites()
            #expect(try await cluster.psql("SELECT string_agg(sequence::text, ',' ORDER BY sequence) FROM attempts", database: name) == "1,2,3")
            await #expect(throws: (any Error).self) {
                try await cluster.psql(
                    "INSERT INTO attempts (at, code, detail, receipt_sha256, client_address) VALUES (0, 'c', 'd', 'x', 'a')", database: name)
            }
            // Migrated by a newer Coffer: refused though nothing is pending (the restart path).
            try await cluster.psql("INSERT INTO coffer_migrations VALUES ('9999_from_the_future', 0)", database: name)
            await #expect(throws: PostgresStoreError.self) { try await backend.pendingMigrations() }
            await #expect(throws: PostgresStoreError.self) { try await backend.migrate() }
        } catch {
            await backend.close()
            throw error
        }
        await backend.close()
    }
}
