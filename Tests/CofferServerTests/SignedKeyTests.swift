import CofferApp
import CofferCore
import CofferStore
import CofferTestSupport
import Crypto
import Foundation
import GRDB
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

@testable import CofferServer

/// API keys are signed with the ledger key: whoever can write the database but does not hold
/// that key cannot mint a key, lift a key's role, or bring a revoked key back.
@Suite struct SignedKeyTests {
    /// Runs `sql` on `queue` and expects the schema to refuse it with a constraint error (a
    /// trigger's RAISE, a CHECK): not any database error, which a lock or a typo would be too.
    static func expectRefused(_ sql: String, on queue: DatabaseQueue, sourceLocation: SourceLocation = #_sourceLocation) {
        let error = #expect(throws: DatabaseError.self, "\(sql)", sourceLocation: sourceLocation) {
            try queue.write { db in try db.execute(sql: sql) }
        }
        #expect(error?.resultCode == .SQLITE_CONSTRAINT, "\(sql): \(String(describing: error))", sourceLocation: sourceLocation)
    }

    /// The row of a key the database holds, read straight from the file.
    static func row(_ queue: DatabaseQueue, name: String) throws -> Row {
        try #require(try queue.read { db in try Row.fetchOne(db, sql: "SELECT * FROM api_keys WHERE name = ?", arguments: [name]) })
    }

    @Test func aKeyWrittenIntoTheDatabaseBehindCofferIsRefused() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let store = CapturingLogHandler.Store()
        var logger = Logger(label: "capture") { _ in CapturingLogHandler(store: store) }
        logger.logLevel = .notice
        let queue = try DatabaseQueue(path: h.directory.appendingPathComponent("coffer.sqlite").path)
        let admin = try Self.row(queue, name: "test admin")
        let adminSignature: String? = admin["signature"]
        let adminCreatedAt: Double? = admin["created_at"]
        #expect(adminSignature?.isEmpty == false, "a key made by APIKeys.create is signed")

        // Rows an insider adds: no signature, another key's signature, a signature by another key.
        let forged = ["cof_admin_forged-1", "cof_admin_forged-2", "cof_admin_forged-3"]
        let stranger = LedgerSigner(privateKey: Curve25519.Signing.PrivateKey())
        let strangers = try stranger.signed(
            APIKey(keyId: "forged-3", name: "forged 3", role: .admin, secretHash: APIKeys.hash(forged[2]), createdAt: Date()))
        try await queue.write { db in
            let insert = "INSERT INTO api_keys (key_id, name, role, secret_hash, created_at, signature) VALUES (?, ?, 'admin', ?, ?, ?)"
            try db.execute(sql: insert, arguments: ["forged-1", "forged 1", APIKeys.hash(forged[0]), 1_800_000_000, nil])
            try db.execute(sql: insert, arguments: ["forged-2", "forged 2", APIKeys.hash(forged[1]), adminCreatedAt, adminSignature])
            try db.execute(
                sql: insert,
                arguments: [
                    "forged-3", "forged 3", APIKeys.hash(forged[2]), strangers.createdAt.timeIntervalSince1970, strangers.signature,
                ])
        }
        // What the database itself refuses: any change but one revocation (or one signature of an
        // unsigned key), a delete, a key put in place of another.
        let refused = [
            "UPDATE api_keys SET role = 'admin' WHERE name = 'test auditor'",
            "UPDATE api_keys SET secret_hash = '\(APIKeys.hash(forged[0]))' WHERE name = 'test admin'",
            "UPDATE api_keys SET signature = NULL WHERE name = 'test admin'",
            "UPDATE api_keys SET signature = '\(adminSignature ?? "")' WHERE name = 'forged 2'",
            "UPDATE api_keys SET revoked_at = 1e300 WHERE name = 'test auditor'",
            "UPDATE api_keys SET revoked_at = 'soon' WHERE name = 'test auditor'",
            "DELETE FROM api_keys WHERE name = 'test auditor'",
            "INSERT OR REPLACE INTO api_keys SELECT 'forged-4', name, 'admin', secret_hash, created_at, NULL, signature FROM api_keys WHERE name = 'test auditor'",
            // A replace by rowid alone would delete the row without the delete trigger, by insert or
            // by update (this one looks like a revocation).
            """
            UPDATE OR REPLACE api_keys SET rowid = (SELECT rowid FROM api_keys WHERE name = 'test auditor'), revoked_at = 5
            WHERE name = 'forged 1'
            """,
            """
            INSERT OR REPLACE INTO api_keys (rowid, key_id, name, role, secret_hash, created_at)
            SELECT rowid, 'junk', 'junk', 'auditor', 'junk-hash', 0 FROM api_keys WHERE name = 'test auditor'
            """,
        ]
        for sql in refused {
            Self.expectRefused(sql, on: queue)
        }

        try await h.application(logger: logger).test(.router) { client in
            #expect(try await client.execute(uri: "/v1/whoami", method: .get, headers: h.bearer(h.adminKey)).status == .ok)
            for secret in forged {
                let answer = try await client.execute(uri: "/v1/admin/products", method: .get, headers: h.bearer(secret))
                #expect(answer.status == .unauthorized, "\(secret)")
                #expect(try Harness.json(answer)["detail"] as? String == "unknown or revoked key", "the answer an unknown key gets")
            }
            for id in ["forged-1", "forged-2", "forged-3"] {
                #expect(store.all.contains { $0.hasPrefix("error API key refused") && $0.contains("(\(id))") }, "\(id) is logged")
            }

            // The file's owner can drop the guard; the signature still stands: an auditor key
            // lifted to admin is refused, and so is the row put back as it was signed.
            try await queue.write { db in
                try db.execute(sql: "DROP TRIGGER api_keys_revoke_or_sign_once")
                try db.execute(sql: "UPDATE api_keys SET role = 'admin' WHERE name = 'test auditor'")
            }
            #expect(try await client.execute(uri: "/v1/whoami", method: .get, headers: h.bearer(h.auditorKey)).status == .unauthorized)
            try await queue.write { db in try db.execute(sql: "UPDATE api_keys SET role = 'auditor' WHERE name = 'test auditor'") }
            #expect(try await client.execute(uri: "/v1/whoami", method: .get, headers: h.bearer(h.auditorKey)).status == .ok)
        }
    }

    /// At start the server names every live key the ledger key did not sign.
    @Test func theServerNamesTheKeysItRefusesAtStart() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let queue = try DatabaseQueue(path: h.directory.appendingPathComponent("coffer.sqlite").path)
        try await queue.write { db in
            try db.execute(
                sql: "INSERT INTO api_keys (key_id, name, role, secret_hash, created_at) VALUES ('planted', ?, 'admin', ?, 1)",
                arguments: ["ops\u{1B}[2J", APIKeys.hash("cof_admin_planted")])
        }
        try queue.close()
        let store = CapturingLogHandler.Store()
        var logger = Logger(label: "capture") { _ in CapturingLogHandler(store: store) }
        logger.logLevel = .notice
        let app = try await buildApplication(h.services.configuration, logger: logger)
        try await app.test(.live) { client in
            let health = try await client.execute(uri: "/healthz", method: .get)
            #expect(health.status == .ok)
        }
        let warnings = store.all.filter { $0.hasPrefix("warning 1 live API key(s) are not signed by the ledger key") }
        // Named with the row's control characters escaped: the row was written by someone else.
        #expect(warnings.count == 1 && warnings.first?.contains("admin 'ops\\u{1B}[2J' (planted)") == true, "\(store.all)")
        #expect(!store.all.contains { $0.contains("\u{1B}") })
    }

    @Test func aRevocationIsForGood() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let auditor = try #require(try await h.services.keys.key(secretHash: APIKeys.hash(h.auditorKey)))
        #expect(try await h.services.keys.revoke(keyId: auditor.keyId, at: Date()))
        let queue = try DatabaseQueue(path: h.directory.appendingPathComponent("coffer.sqlite").path)
        Self.expectRefused("UPDATE api_keys SET revoked_at = NULL WHERE name = 'test auditor'", on: queue)
        Self.expectRefused("UPDATE api_keys SET revoked_at = 0 WHERE name = 'test auditor'", on: queue)
        try await h.app.test(.router) { client in
            let answer = try await client.execute(uri: "/v1/whoami", method: .get, headers: h.bearer(h.auditorKey))
            #expect(answer.status == .unauthorized, "a revoked key stays revoked")
        }
    }

    /// Keys made before migration 0006 were not signed: refused until `coffer keys adopt --sign`
    /// (run with the ledger key) signs them, which the chained admin log records.
    @Test func keysFromBeforeTheMigrationAreRefusedUntilAdopted() async throws {
        let directory = try makeTemporaryDirectory(prefix: "coffer-unsigned-keys")
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("coffer.sqlite").path
        let secret = "cof_admin_from-an-older-coffer"
        do {
            let queue = try DatabaseQueue(path: path)
            var migrator = DatabaseMigrator()
            for migration in EmbeddedMigrations.all where migration.name < "0006" {
                migrator.registerMigration(migration.name) { db in try db.execute(sql: migration.sql) }
            }
            try migrator.migrate(queue)
            try await queue.write { db in
                try db.execute(
                    sql:
                        "INSERT INTO api_keys (key_id, name, role, secret_hash, created_at, revoked_at) VALUES ('old', 'old admin', 'admin', ?, ?, NULL)",
                    arguments: [APIKeys.hash(secret), 1_700_000_000.123_456_7])
            }
            try queue.close()
        }
        #expect(try CofferDatabase.migrate(path: path) == ["0006_signed_api_keys", "0007_admin_events_index", "0008_content_pins"])
        let signer = try LedgerKeyFile.signer(dataDirectory: directory.path)
        func stored() async throws -> APIKey {
            let database = try CofferDatabase(path: path)
            defer { try? database.close() }
            return try #require(try await SQLiteKeys(database).key(secretHash: APIKeys.hash(secret)))
        }
        let before = try await stored()
        #expect(before.signature == nil && !before.isAuthentic(signedBy: signer.publicKey))

        let listed = try await CofferExecutable.run(["keys", "adopt", "--data-dir", directory.path])
        #expect(listed.status == 0, "\(listed.stderr)")
        #expect(listed.stdout.contains("unsigned: admin key 'old admin' (id old"), "\(listed.stdout)")
        #expect(try await stored().signature == nil, "listing signs nothing")
        // Rows added behind Coffer's back after the list was read: one unsigned, one with a junk
        // signature. Only the key named is signed; the junk one cannot be, and is listed as such.
        do {
            let queue = try DatabaseQueue(path: path)
            try await queue.write { db in
                let insert = "INSERT INTO api_keys (key_id, name, role, secret_hash, created_at, signature) VALUES (?, 'old admin', 'admin', ?, 1, ?)"
                try db.execute(sql: insert, arguments: ["planted", APIKeys.hash("cof_admin_planted"), nil])
                try db.execute(sql: insert, arguments: ["junk", APIKeys.hash("cof_admin_junk"), "x"])
            }
            try queue.close()
        }
        let adopted = try await CofferExecutable.run(["keys", "adopt", "--sign", "old", "--data-dir", directory.path])
        #expect(adopted.status == 0, "\(adopted.stderr)")
        #expect(adopted.stdout.contains("signed: admin key 'old admin' (id old,"), "\(adopted.stdout)")
        #expect(!adopted.stdout.contains("planted"), "\(adopted.stdout)")
        let after = try await stored()
        #expect(after.isAuthentic(signedBy: signer.publicKey), "signed over the creation time as stored")
        #expect(after.createdAt == before.createdAt)
        let again = try await CofferExecutable.run(["keys", "adopt", "--data-dir", directory.path])
        #expect(again.stdout.contains("unsigned: admin key 'old admin' (id planted,"), "\(again.stdout)")
        #expect(again.stdout.contains("signature invalid (re-issue it, then revoke this one): admin key 'old admin' (id junk,"), "\(again.stdout)")
        #expect(!again.stdout.contains("(id old,"), "\(again.stdout)")
        let junk = try await CofferExecutable.run(["keys", "adopt", "--sign", "junk", "--data-dir", directory.path])
        #expect(junk.status != 0 && junk.stderr.contains("junk: its signature is invalid"), "\(junk.stdout)\(junk.stderr)")
        let signedAlready = try await CofferExecutable.run(["keys", "adopt", "--sign", "old", "--sign", "old", "--data-dir", directory.path])
        #expect(
            signedAlready.status != 0 && signedAlready.stderr.contains("old: not a live key the ledger key did not sign"), "\(signedAlready.stderr)")
        for id in ["planted", "junk"] {
            let revoked = try await CofferExecutable.run(["keys", "revoke", "--key-id", id, "--data-dir", directory.path])
            #expect(revoked.status == 0 && revoked.stdout.contains("revoked admin key 'old admin'"), "\(revoked.stdout)\(revoked.stderr)")
        }
        let clean = try await CofferExecutable.run(["keys", "adopt", "--data-dir", directory.path])
        #expect(clean.stdout.contains("every live key is signed by the ledger key"), "\(clean.stdout)")
        let database = try CofferDatabase(path: path)
        defer { try? database.close() }
        let actions = try await SQLiteAdminLog(database).actions(after: 0, limit: 10)
        #expect(actions.map(\.action) == ["key.create", "key.revoke", "key.revoke"], "\(actions)")
        #expect(actions.first?.detail == "admin key old, made before keys were signed: signed by keys adopt")
        #expect(actions.dropFirst().map(\.detail) == ["admin key planted", "admin key junk"])
    }
}
