import CofferCore
import CofferPostgres
import CofferServer
import CofferTestSupport
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `deploy/postgres-roles.sql` as the deploy guide runs it — the roles, a database `coffer`
/// owned by `coffer_owner`, `coffer migrate` as the owner, then the file as a superuser — and
/// then an instance connected as `coffer_app` doing an instance's work, `coffer keys` as
/// `coffer_app`, `coffer ledger verify` as `coffer_audit`; and what each role must not do.
@Suite struct PostgresRolesTests {
    typealias Server = CrashSafetyTests.Server

    static var rolesFile: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("deploy/postgres-roles.sql")
    }

    /// Posts a notification minted by the demo's sandbox CA for `transactionId`.
    static func notify(_ client: TestClient, data: URL, type: String, transactionId: String) async throws -> TestClient.Response {
        let minted = try await CofferExecutable.run([
            "sandbox", "notification", "--dir", data.appendingPathComponent("sandbox").path, "--type", type, "--bundle-id",
            "com.coffer.demo", "--product", "com.coffer.demo.levelpack1", "--transaction-id", transactionId,
        ])
        try #require(minted.status == 0, "\(minted.stderr)")
        let payload = minted.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        return try await client.execute(
            .init(
                "/v1/notifications", method: .post, headers: [.contentType: "application/json"],
                body: ByteBuffer(string: "{\"signedPayload\":\"\(payload)\"}")))
    }

    /// `keys create --database` without the instances' ledger key makes none: on an empty
    /// shared ledger a key made here would seal the chain with a key no instance holds.
    @Test func keysCreateOnPostgreSQLNeverMakesALedgerKey() async throws {
        let root = try makeTemporaryDirectory(prefix: "coffer-keys-pg")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("data")
        let url = try await PostgresCluster.shared().createDatabase()
        #expect(try await CofferExecutable.run(["migrate", "--database", url]).status == 0)
        let created = try await CofferExecutable.run([
            "keys", "create", "--database", url, "--data-dir", data.path, "--role", "admin", "--name", "no key",
        ])
        #expect(created.status == 2, "\(created.stdout)\(created.stderr)")
        #expect(created.stderr.contains("--ledger-key"), "\(created.stderr)")
        #expect(!FileManager.default.fileExists(atPath: data.appendingPathComponent("keys/ledger-signing.key").path))
        let entries = try await PostgresCluster.shared().psql(
            "SELECT count(*) FROM ledger_events", database: String(url.split(separator: "/").last?.split(separator: "?").first ?? ""))
        #expect(entries == "0")
    }

    @Test func theApplicationRoleRunsAnInstanceAndTheAuditRoleVerifies() async throws {
        // A cluster of its own: the file names the database `coffer` and its roles are the cluster's.
        let cluster = try await PostgresCluster.start()
        defer { try? cluster.destroy() }
        try await cluster.psql("CREATE ROLE coffer_owner LOGIN; CREATE ROLE coffer_app LOGIN; CREATE ROLE coffer_audit LOGIN")
        try await cluster.psql("CREATE DATABASE coffer OWNER coffer_owner")
        func url(_ role: String) -> String { cluster.url(database: "coffer").replacingOccurrences(of: "//postgres@", with: "//\(role)@") }
        try #require(url("coffer_app") != cluster.url(database: "coffer"), "the test cluster's URL names another user")
        let migrated = try await CofferExecutable.run(["migrate", "--database", url("coffer_owner")])
        try #require(migrated.status == 0, "\(migrated.stdout)\(migrated.stderr)")
        try await cluster.psql(try String(contentsOf: Self.rolesFile, encoding: .utf8), database: "coffer")

        let root = try makeTemporaryDirectory(prefix: "coffer-roles")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("data")
        // Starting checks the schema and the tables the chain must cover, and seeds the demo's
        // catalogue and admin key.
        let server = try await Server(dataDirectory: data, arguments: ["--database", url("coffer_app")])
        defer { server.kill(SIGKILL) }
        let tiles = ObjectStoreScaleOutTests.bytes(5_000, seed: 7)
        try await ObjectStoreScaleOutTests.upload(tiles, assetId: "levelpack1-tiles", to: server)
        let client = ObjectStoreScaleOutTests.client(server)
        defer { Task { try? await client.shutdown() } }
        let receipt = try #require(try await ScaleOutTests.receipts(data, first: 8100, count: 1).first)
        let created = try await ScaleOutTests.redeem(client, receipt.1)
        try #require(created.status == .created, "\(String(buffer: created.body ?? ByteBuffer()))")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(ObjectStoreScaleOutTests.body(created))) as? [String: Any])
        let assets = try #require(json["assets"] as? [[String: Any]])
        for asset in assets {
            let download = try await client.execute(.init(try #require(asset["url"] as? String), method: .get))
            #expect(download.status == .ok)
        }
        #expect(try await ScaleOutTests.redeem(client, receipt.1).status == .conflict)
        for type in ["REFUND_DECLINED", "REFUND"] {
            let answered = try await Self.notify(client, data: data, type: type, transactionId: receipt.0)
            #expect(answered.status == .ok, "\(type): \(String(buffer: answered.body ?? ByteBuffer()))")
        }
        let keys = try await CofferExecutable.run([
            "keys", "create", "--database", url("coffer_app"), "--data-dir", data.path, "--role", "auditor", "--name", "roles",
        ])
        #expect(keys.status == 0, "\(keys.stdout)\(keys.stderr)")
        // Delivery evidence is written once a second, off the download path.
        let deadline = ContinuousClock.now + .seconds(10)
        while try await cluster.psql("SELECT count(*) > 0 FROM deliveries", database: "coffer") != "t", ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        let counts = try await cluster.psql(
            """
            SELECT (SELECT count(*) FROM redemptions) || ' ' || (SELECT count(*) FROM attempts) || ' ' || (SELECT count(*) FROM purchase_events)
                || ' ' || (SELECT count(*) FROM revocations) || ' ' || (SELECT count(*) > 0 FROM deliveries)
                || ' ' || (SELECT count(*) > 0 FROM admin_actions)
            """, database: "coffer")
        #expect(counts == "1 1 1 1 true true", "redemptions, attempts, purchase events, revocations, deliveries, admin actions: \(counts)")
        let verify = try await CofferExecutable.run(["ledger", "verify", "--database", url("coffer_audit"), "--data-dir", data.path])
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
        #expect(verify.stdout.contains("intact"), "\(verify.stdout)")
        // The export reads events flushed first: none to write for the read-only audit role.
        let export = try await CofferExecutable.run(["ledger", "export", "--database", url("coffer_audit"), "--data-dir", data.path])
        #expect(export.status == 0, "\(export.stderr)")
        #expect(export.stdout.split(separator: "\n").count >= 3, "\(export.stdout)")

        // What the roles must not do (as the role, through SET ROLE).
        let forbidden = [
            ("coffer_app", "CREATE TABLE stolen (x int)"),
            ("coffer_app", "DELETE FROM ledger_head"),
            ("coffer_app", "INSERT INTO coffer_migrations VALUES ('9999_forged', 0)"),
            ("coffer_app", "ALTER TABLE redemptions DISABLE TRIGGER redemptions_append_only"),
            ("coffer_audit", "INSERT INTO api_keys SELECT * FROM api_keys LIMIT 1"),
        ]
        for (role, statement) in forbidden {
            await #expect(throws: PostgresCluster.Failure.self, "\(role): \(statement)") {
                try await cluster.psql("SET ROLE \(role); \(statement)", database: "coffer")
            }
        }
        #expect(try await cluster.psql("SET ROLE coffer_app; SHOW synchronous_commit", database: "coffer").hasSuffix("on"))

        // API keys (migration 0007): coffer_app adds keys and revokes them once, nothing else, and
        // a key it writes without the ledger key — here with another key's signature — is refused.
        let rolesKey = keys.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        func whoami(_ secret: String) async throws -> TestClient.Response {
            try await client.execute(.init("/v1/whoami", method: .get, headers: [.authorization: "Bearer \(secret)"]))
        }
        #expect(try await whoami(rolesKey).status == .ok)
        let forged = "cof_admin_forged-by-coffer_app"
        try await cluster.psql(
            """
            SET ROLE coffer_app; INSERT INTO api_keys (key_id, name, role, secret_hash, created_at, signature)
            SELECT 'forged', 'forged', 'admin', '\(APIKeys.hash(forged))', created_at, signature FROM api_keys WHERE name = 'roles'
            """, database: "coffer")
        #expect(try await whoami(forged).status == .unauthorized)
        for statement in [
            "UPDATE api_keys SET role = 'admin' WHERE name = 'roles'",
            "UPDATE api_keys SET secret_hash = '\(APIKeys.hash(forged))' WHERE name = 'roles'",
            "DELETE FROM api_keys WHERE name = 'roles'", "TRUNCATE api_keys",
            "UPDATE api_keys SET signature = NULL WHERE name = 'roles'", "UPDATE api_keys SET revoked_at = 'Infinity' WHERE name = 'roles'",
        ] {
            await #expect(throws: PostgresCluster.Failure.self, "coffer_app: \(statement)") {
                try await cluster.psql("SET ROLE coffer_app; \(statement)", database: "coffer")
            }
        }
        let revoked = try await CofferExecutable.run(["keys", "revoke", "--database", url("coffer_app"), "--data-dir", data.path, "--key", rolesKey])
        #expect(revoked.status == 0, "\(revoked.stdout)\(revoked.stderr)")
        await #expect(throws: PostgresCluster.Failure.self) {
            try await cluster.psql("SET ROLE coffer_app; UPDATE api_keys SET revoked_at = NULL WHERE name = 'roles'", database: "coffer")
        }
        #expect(try await whoami(rolesKey).status == .unauthorized)
        // The audit role can take no advisory lock (the chain's would stop every append), call
        // none of Coffer's routines, and write no flush record; the instances' role can.
        let denied = [
            "SELECT pg_advisory_lock(\(0x636f_6666_6368_6169))", "SELECT pg_try_advisory_xact_lock(1)", "SELECT pg_advisory_lock_shared(1, 2)",
            "SELECT * FROM coffer_take_chain(1, '{}', '{}')", "BEGIN READ WRITE; SELECT pg_logical_emit_message(true, 'coffer', ''); COMMIT",
            "BEGIN READ WRITE; SELECT lo_from_bytea(0, 'x'); COMMIT",
        ]
        for statement in denied {
            do {
                _ = try await cluster.psql("SET ROLE coffer_audit; \(statement)", database: "coffer")
                Issue.record("coffer_audit may: \(statement)")
            } catch {
                #expect("\(error)".contains("permission denied"), "\(statement): \(error)")
            }
        }
        #expect(
            try await cluster.psql(
                "SET ROLE coffer_app; SELECT has_function_privilege('pg_logical_emit_message(boolean,text,text)', 'EXECUTE') AND has_function_privilege('coffer_take_chain(bigint,text[],text[])', 'EXECUTE')",
                database: "coffer"
            ).hasSuffix("t"))
        // The application role pins a content object's checked version and reads it back (the
        // table is appended only: the defaults for a later table are all it needs).
        let backend = try await PostgresBackend.open(try PostgresURL(url("coffer_app")), poolSize: 1, timeouts: false, logger: Logger(label: "pins"))
        do {
            let pins = PostgresCatalogue(backend)
            let object = String(repeating: "a", count: 64)
            try await pins.pin(location: "127.0.0.1:9000 s3://game", sha256: object, tag: "etag-1", at: Date())
            try await pins.pin(location: "127.0.0.1:9000 s3://game", sha256: object, tag: "etag-2", at: Date())
            #expect(try await pins.pinnedTag(location: "127.0.0.1:9000 s3://game", sha256: object) == "etag-2")
            await backend.close()
        } catch {
            await backend.close()
            throw error
        }
        // The owner still migrates (it takes the migrations' advisory lock).
        let again = try await CofferExecutable.run(["migrate", "--database", url("coffer_owner")])
        #expect(again.status == 0, "\(again.stdout)\(again.stderr)")
    }
}
