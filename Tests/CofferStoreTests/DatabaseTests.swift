import CofferCore
import CofferTestSupport
import Foundation
import GRDB
import Testing

@testable import CofferStore

@Suite("Migrations and connection settings")
struct DatabaseTests {
    /// migrations/ in the source checkout, found from this file's path.
    static let migrationsDirectory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent()  // Tests/CofferStoreTests
        .deletingLastPathComponent()  // Tests
        .deletingLastPathComponent()  // package root
        .appendingPathComponent("migrations")

    @Test("embedded migrations are byte-identical to migrations/*.sql")
    func embeddedMatchFiles() throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.migrationsDirectory.path)
            .filter { $0.hasSuffix(".sql") }
            .sorted()
        try #require(!files.isEmpty, "no SQL files in \(Self.migrationsDirectory.path)")
        #expect(files.map { String($0.dropLast(4)) } == EmbeddedMigrations.all.map(\.name))
        for (file, embedded) in zip(files, EmbeddedMigrations.all) {
            let onDisk = try Data(contentsOf: Self.migrationsDirectory.appendingPathComponent(file))
            #expect(onDisk == Data(embedded.sql.utf8), "\(file) differs from EmbeddedMigrations entry \(embedded.name)")
        }
    }

    @Test("migration names are unique, in file-name order, and look like NNNN_name")
    func migrationNames() {
        let names = EmbeddedMigrations.all.map(\.name)
        #expect(names == names.sorted())
        #expect(Set(names).count == names.count)
        #expect(names.first == "0001_initial")
        for name in names {
            let digits = name.prefix(4)
            #expect(digits.count == 4 && digits.allSatisfy(\.isASCII) && digits.allSatisfy(\.isNumber), "\(name)")
            #expect(name.dropFirst(4).first == "_", "\(name)")
        }
    }

    @Test("a new database is migrated and the migrations are recorded")
    func migrationsApplied() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir.appendingPathComponent("ledger.sqlite").path
            let names = EmbeddedMigrations.all.map(\.name)
            #expect(try CofferDatabase.migrate(path: path) == names)
            #expect(try CofferDatabase.migrate(path: path) == [])
            let db = try CofferDatabase(path: path)
            #expect(try db.appliedMigrations() == names)
            let tables = try db.fetchInt(
                sql: """
                    SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'
                    AND name IN ('products', 'assets', 'redemptions', 'attempts', 'api_keys', 'grdb_migrations')
                    """)
            #expect(tables == 6)
            let indexes = try db.fetchInt(sql: "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name LIKE 'redemptions_%'")
            // replay (environment, key), transaction id, original transaction id, product, bundle, date, player.
            #expect(indexes == 7)
        }
    }

    @Test("a product's attempts are read through attempts_product_id (migration 0005), not by walking the table")
    func attemptsOfAProductUseTheirIndex() async throws {
        try await withTemporaryDirectory { dir in
            let db = try CofferDatabase(path: dir.appendingPathComponent("ledger.sqlite").path)
            var filter = AuditFilter()
            filter.productId = "p7"
            filter.after = 20000
            filter.limit = 100
            let request = AttemptRecord.audit(filter)
            let plan = try await db.pool.read { db in
                let statement = try request.makePreparedRequest(db).statement
                return try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + statement.sql, arguments: statement.arguments).map { $0["detail"] as String }
            }.joined(separator: "\n")
            #expect(plan.contains("attempts_product_id"), "\(plan)")
        }
    }

    @Test("init creates the file")
    func createsFile() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir.appendingPathComponent("new.sqlite").path
            #expect(!FileManager.default.fileExists(atPath: path))
            _ = try CofferDatabase(path: path)
            #expect(FileManager.default.fileExists(atPath: path))
        }
    }

    @Test("a database migrated by a newer build is refused")
    func unknownMigrationRefused() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir.appendingPathComponent("ledger.sqlite").path
            let db = try CofferDatabase(path: path)
            try db.execute(sql: "INSERT INTO grdb_migrations (identifier) VALUES ('9999_future')")
            #expect(throws: StoreError.unknownMigrations(["9999_future"])) {
                _ = try CofferDatabase(path: path)
            }
        }
    }

    @Test("WAL journal, synchronous FULL and foreign keys on the writer, also after writes and reopening")
    func pragmas() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir.appendingPathComponent("ledger.sqlite").path
            do {
                let db = try CofferDatabase(path: path)
                #expect(try db.journalMode() == "wal")
                #expect(try db.synchronousMode() == 2)
                #expect(try db.foreignKeysEnabled())
                _ = try await SQLiteLedger(db).insert(makeRedemption("t1"))
                #expect(try db.synchronousMode() == 2)
            }
            let reopened = try CofferDatabase(path: path)
            #expect(try reopened.journalMode() == "wal")
            #expect(try reopened.synchronousMode() == 2)
            #expect(try await SQLiteLedger(reopened).redemptions(AuditFilter()).map(\.transactionId) == ["t1"])
        }
    }

    @Test("the schema enforces CHECK, NOT NULL and UNIQUE constraints")
    func schemaConstraints() async throws {
        try await withDatabase { db throws in
            // Every column named: a row of the wrong width fails on its column count, whatever its values.
            let product = "INSERT INTO products (product_id, bundle_id, type, asset_ids, title, updated_at, family_shareable, duration_seconds)"
            let asset = "INSERT INTO assets (asset_id, version, name, content_type, size, sha256, created_at)"
            // The column lists are right: a valid row goes in.
            try db.execute(sql: "\(product) VALUES ('valid', 'b', 'consumable', '[]', 't', 0, 0, NULL)")
            let invalid: [(sql: String, code: ResultCode)] = [
                // unknown product type
                ("\(product) VALUES ('p', 'b', 'subscription', '[]', 't', 0, 0, NULL)", .SQLITE_CONSTRAINT_CHECK),
                // asset_ids is not a JSON array
                ("\(product) VALUES ('p', 'b', 'consumable', '{\"a\":1}', 't', 0, 0, NULL)", .SQLITE_CONSTRAINT_CHECK),
                // NULL primary key
                ("\(product) VALUES (NULL, 'b', 'consumable', '[]', 't', 0, 0, NULL)", .SQLITE_CONSTRAINT_NOTNULL),
                // the valid row's product id again
                ("\(product) VALUES ('valid', 'b', 'consumable', '[]', 't', 0, 0, NULL)", .SQLITE_CONSTRAINT_PRIMARYKEY),
                // version 0, negative size, short digest
                ("\(asset) VALUES ('a', 0, 'n', 'c', 1, '\(fakeHash("x"))', 0)", .SQLITE_CONSTRAINT_CHECK),
                ("\(asset) VALUES ('a', 1, 'n', 'c', -1, '\(fakeHash("x"))', 0)", .SQLITE_CONSTRAINT_CHECK),
                ("\(asset) VALUES ('a', 1, 'n', 'c', 1, 'abc', 0)", .SQLITE_CONSTRAINT_CHECK),
                // unknown source format
                (
                    """
                    INSERT INTO redemptions (redemption_id, transaction_id, product_id, bundle_id, environment, quantity, receipt_sha256,
                    source_format, redeemed_at, client_address, status, grant_hash) VALUES ('r', 't', 'p', 'b', 'e', 1, 'h', 'jws', 0, 'c', 's', 'g')
                    """, .SQLITE_CONSTRAINT_CHECK
                ),
                // unknown role
                (
                    "INSERT INTO api_keys (key_id, name, role, secret_hash, created_at, revoked_at) VALUES ('k', 'n', 'root', 'h', 0, NULL)",
                    .SQLITE_CONSTRAINT_CHECK
                ),
            ]
            for (sql, code) in invalid {
                // The constraint named, not any error: a wrong column count or a typo is an error too.
                let error = #expect(throws: DatabaseError.self, "\(sql)") { try db.execute(sql: sql) }
                #expect(error?.extendedResultCode == code, "\(sql): \(String(describing: error))")
            }
            #expect(try db.fetchInt(sql: "SELECT (SELECT COUNT(*) FROM products) + (SELECT COUNT(*) FROM assets)") == 1, "only the valid row")

            let catalogue = SQLiteCatalogue(db)
            await #expect(throws: (any Error).self) {
                _ = try await catalogue.addAssetVersion(assetId: "a", name: "n", contentType: "c", size: 1, sha256: "short", at: instant(0))
            }
            await #expect(throws: (any Error).self) {
                _ = try await catalogue.addAssetVersion(assetId: "a", name: "n", contentType: "c", size: -5, sha256: fakeHash("a"), at: instant(0))
            }
            #expect(try await catalogue.assets().isEmpty)
        }
    }
}
