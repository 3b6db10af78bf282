import CofferCore
import CofferTestSupport
import Foundation
import GRDB
import Hummingbird
import HummingbirdTesting
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `coffer serve --demo` restarts and `coffer keys revoke` from stdin, on the real executable.
@Suite(.serialized) struct HardeningCLITests {
    /// Live (unrevoked) keys named like the demo's, per role.
    static func liveDemoKeys(_ data: URL) throws -> [String: Int] {
        let db = try DatabaseQueue(path: data.appendingPathComponent("coffer.sqlite").path)
        let rows = try db.read { db in
            try Row.fetchAll(db, sql: "SELECT role, COUNT(*) AS n FROM api_keys WHERE name LIKE 'demo %' AND revoked_at IS NULL GROUP BY role")
        }
        return Dictionary(uniqueKeysWithValues: rows.map { (($0["role"] as String?) ?? "?", ($0["n"] as Int?) ?? 0) })
    }

    static func printedAuditorKey(_ server: CrashSafetyTests.Server) throws -> String {
        let text = try String(contentsOf: server.log, encoding: .utf8)
        let range = try #require(text.range(of: "auditor key: "))
        return String(text[range.upperBound...].drop { $0 == " " }.prefix { !$0.isWhitespace })
    }

    static func stop(_ server: CrashSafetyTests.Server) async throws {
        server.kill(SIGTERM)
        #expect(try await server.waitForExit(seconds: 20) == 0)
    }

    /// Restarting the demo reuses its keys (kept in DATA/sandbox/demo-keys.json, 0600): two
    /// starts leave exactly one live admin and one live auditor demo key, the ones printed.
    /// A demo key revoked in between is replaced on the next start, the other one kept.
    @Test func demoRestartsReuseTheirKeys() async throws {
        let root = try makeTemporaryDirectory(prefix: "coffer-crash")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("data")

        let first = try await CrashSafetyTests.Server(dataDirectory: data)
        let admin = first.adminKey
        let auditor = try Self.printedAuditorKey(first)
        try await Self.stop(first)
        #expect(try Self.liveDemoKeys(data) == ["admin": 1, "auditor": 1])

        let second = try await CrashSafetyTests.Server(dataDirectory: data)
        #expect(second.adminKey == admin)
        #expect(try Self.printedAuditorKey(second) == auditor)
        #expect(try String(contentsOf: second.log, encoding: .utf8).contains("the same keys as last time"))
        let client = TestClient(host: "127.0.0.1", port: second.port, configuration: .init(timeout: .seconds(10)))
        client.connect()
        let products = try await client.execute(.init("/v1/admin/products", method: .get, headers: [.authorization: "Bearer \(admin)"]))
        #expect(products.status == .ok, "the reprinted key works")
        try await client.shutdown()
        try await Self.stop(second)
        #expect(try Self.liveDemoKeys(data) == ["admin": 1, "auditor": 1], "two starts: one live key per role")
        let file = data.appendingPathComponent("sandbox/demo-keys.json").path
        let mode = try #require(try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? NSNumber)
        #expect(mode.intValue & 0o777 == 0o600)

        // The admin key is revoked (from stdin): the next start replaces it and keeps the auditor's.
        #expect(try await CofferExecutable.run(["keys", "revoke", "--data-dir", data.path], stdin: Data((admin + "\n").utf8)).status == 0)
        let third = try await CrashSafetyTests.Server(dataDirectory: data)
        #expect(third.adminKey != admin)
        #expect(try Self.printedAuditorKey(third) == auditor)
        try await Self.stop(third)
        #expect(try Self.liveDemoKeys(data) == ["admin": 1, "auditor": 1])

        // Without the file (deleted, or a data directory from an older Coffer) the earlier keys
        // cannot be found again (only hashes are stored): new ones, and a warning that says so.
        try FileManager.default.removeItem(atPath: file)
        let fourth = try await CrashSafetyTests.Server(dataDirectory: data)
        #expect(fourth.adminKey != third.adminKey)
        #expect(try String(contentsOf: fourth.log, encoding: .utf8).contains("demo-keys.json is missing: creating new demo keys"))
        try await Self.stop(fourth)
    }

    /// `coffer keys revoke` reads the key from stdin when `--key` is absent (keeping it out of
    /// shell history and `ps`); `--key` still works; no key at all is a usage error.
    @Test func keysRevokeReadsTheKeyFromStdin() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let dir = h.directory.path
        let created = try await CofferExecutable.run(["keys", "create", "--data-dir", dir, "--role", "auditor", "--name", "stdin auditor"])
        #expect(created.status == 0)
        let key = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        try await h.app.test(.router) { client in
            #expect(try await client.execute(uri: "/v1/audit/attempts", method: .get, headers: h.bearer(key)).status == .ok)
            let revoked = try await CofferExecutable.run(["keys", "revoke", "--data-dir", dir], stdin: Data("  \(key)  \n".utf8))
            #expect(revoked.status == 0, "\(revoked.stderr)")
            #expect(revoked.stdout.contains("revoked auditor key 'stdin auditor'"))
            #expect(!revoked.stdout.contains(key) && !revoked.stderr.contains(key), "the key is not echoed")
            #expect(try await client.execute(uri: "/v1/audit/attempts", method: .get, headers: h.bearer(key)).status == .unauthorized)
        }
        #expect(try await CofferExecutable.run(["keys", "revoke", "--data-dir", dir], stdin: Data(key.utf8)).status == 1, "already revoked")
        #expect(try await CofferExecutable.run(["keys", "revoke", "--data-dir", dir], stdin: Data("".utf8)).status == 2, "nothing on stdin")
        #expect(try await CofferExecutable.run(["keys", "revoke", "--data-dir", dir, "--key", h.adminKey]).status == 0, "--key still works")
        let help = try await CofferExecutable.run(["keys", "revoke", "--help"])
        #expect(help.stdout.contains("stdin") && help.stdout.contains("--key"))
    }

    /// A key command never migrates a database a server uses: a newer binary beside an older
    /// server would leave it refusing to start. One behind a migration is refused, untouched.
    @Test func keyCommandsRefuseADatabaseBehindAMigration() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let file = h.directory.appendingPathComponent("coffer.sqlite").path
        let db = try DatabaseQueue(path: file)
        let last = try await db.write { db in
            let name = try String.fetchOne(db, sql: "SELECT identifier FROM grdb_migrations ORDER BY rowid DESC LIMIT 1") ?? ""
            try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier = ?", arguments: [name])
            return name
        }
        let created = try await CofferExecutable.run(["keys", "create", "--data-dir", h.directory.path, "--role", "auditor", "--name", "late"])
        #expect(created.status == 2, "\(created.stdout)\(created.stderr)")
        #expect(created.stderr.contains("run coffer migrate first"), "\(created.stderr)")
        let gc = try await CofferExecutable.run(["content", "gc", "--data-dir", h.directory.path])
        #expect(gc.status == 2 && gc.stderr.contains("run coffer migrate first"), "\(gc.stdout)\(gc.stderr)")
        #expect(try await db.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM grdb_migrations WHERE identifier = ?", arguments: [last]) } == 0)
        #expect(try await db.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM api_keys WHERE name = 'late'") } == 0)
        try db.close()
    }

    /// `coffer serve --host ::` (dual stack, as many deployments bind): an IPv4 client is the
    /// peer `::ffff:127.0.0.1`, which must match `--trusted-proxy 127.0.0.1` — its
    /// X-Forwarded-For reaches the ledger — and the peer itself is recorded as `127.0.0.1`.
    @Test(.enabled(if: FileManager.default.fileExists(atPath: "/proc/net/if_inet6")))
    func aMappedIPv4PeerIsTheTrustedProxy() async throws {
        let root = try makeTemporaryDirectory(prefix: "coffer-crash")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("data")
        let log = root.appendingPathComponent("serve.log")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        let process = Process()
        process.executableURL = try CofferExecutable.url
        process.arguments = [
            "serve", "--demo", "--data-dir", data.path, "--host", "::", "--port", "0", "--content", CrashSafetyTests.Server.contentDirectory.path,
            "--trusted-proxy", "127.0.0.1",
        ]
        let handle = try FileHandle(forWritingTo: log)
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        defer { kill(process.processIdentifier, SIGKILL) }
        var port: Int?
        let started = await eventually(seconds: 20) {
            let text = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
            guard let range = text.range(of: "Server started and listening on ") else { return false }
            let line = text[range.upperBound...].prefix { $0 != "\n" }
            port = line.split(separator: ":").last.flatMap { Int($0.filter(\.isNumber)) }
            return port != nil
        }
        try #require(started, "\((try? String(contentsOf: log, encoding: .utf8)) ?? "")")
        let mint = { (id: String) async throws -> String in
            let run = try await CofferExecutable.run(
                [
                    "sandbox", "receipt", "--dir", data.appendingPathComponent("sandbox").path, "--bundle-id", "com.coffer.demo", "--purchase",
                    "com.coffer.demo.levelpack1:\(id)", "--base64",
                ])
            return "{\"receipt\":\"\(run.stdout.trimmingCharacters(in: .whitespacesAndNewlines))\"}"
        }
        for (id, forwarded) in [("8901", "X-Forwarded-For: 203.0.113.77\r\n"), ("8902", "")] {
            let body = try await mint(id)
            let c = try RawConnection(port: try #require(port))
            await c.send(
                "POST /v1/redemptions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\(forwarded)Content-Length: \(body.utf8.count)\r\n\r\n\(body)"
            )
            let answer = await c.receive(seconds: 10)
            #expect(answer.hasPrefix("HTTP/1.1 201"), "\(answer.prefix(80))")
        }
        let db = try DatabaseQueue(path: data.appendingPathComponent("coffer.sqlite").path)
        let addresses = try await db.read { try String.fetchAll($0, sql: "SELECT client_address FROM redemptions ORDER BY transaction_id") }
        #expect(addresses == ["203.0.113.77", "127.0.0.1"])
    }

    /// Every new setting is read from its flag, its `COFFER_*` variable and its config key.
    @Test func newSettingsComeFromFlagsEnvironmentAndConfigFile() async throws {
        let root = try makeTemporaryDirectory(prefix: "coffer-crash")
        defer { try? FileManager.default.removeItem(at: root) }
        let config = root.appendingPathComponent("coffer.json")
        try Data(
            #"{"bundleIds":["a"],"rateNotifications":7,"rateNotificationBurst":8,"downloadStallTimeout":9,"downloadsPerAddress":10,"bodyBudget":9000000}"#
                .utf8
        ).write(to: config)
        func resolved(_ arguments: [String], environment: [String: String]) async throws -> [String: Any] {
            let data = Data(try await CofferExecutable.run(["serve", "--print-config"] + arguments, environment: environment).stdout.utf8)
            return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        }
        let defaults = try await resolved(["--bundle-id", "a"], environment: [:])
        #expect(defaults["rateNotifications"] as? Int == 600)
        #expect(defaults["rateNotificationBurst"] as? Int == 600)
        #expect(defaults["downloadStallTimeout"] as? Int == 30)
        #expect(defaults["downloadsPerAddress"] as? Int == 16)
        #expect(defaults["bodyBudget"] as? Int == 64 * 1024 * 1024)
        let fromFile = try await resolved(["--config", config.path], environment: [:])
        #expect(fromFile["rateNotifications"] as? Int == 7)
        #expect(fromFile["rateNotificationBurst"] as? Int == 8)
        #expect(fromFile["downloadStallTimeout"] as? Int == 9)
        #expect(fromFile["downloadsPerAddress"] as? Int == 10)
        #expect(fromFile["bodyBudget"] as? Int == 9_000_000)
        let fromEnvironment = try await resolved(
            ["--config", config.path],
            environment: [
                "COFFER_RATE_NOTIFICATIONS": "70", "COFFER_RATE_NOTIFICATION_BURST": "80", "COFFER_DOWNLOAD_STALL_TIMEOUT": "90",
                "COFFER_DOWNLOADS_PER_ADDRESS": "0", "COFFER_BODY_BUDGET": "10000000",
            ])
        #expect(fromEnvironment["rateNotifications"] as? Int == 70)
        #expect(fromEnvironment["rateNotificationBurst"] as? Int == 80)
        #expect(fromEnvironment["downloadStallTimeout"] as? Int == 90)
        #expect(fromEnvironment["downloadsPerAddress"] as? Int == 0)
        #expect(fromEnvironment["bodyBudget"] as? Int == 10_000_000)
        let fromFlags = try await resolved(
            [
                "--config", config.path, "--rate-notifications", "1", "--rate-notification-burst", "2", "--download-stall-timeout", "3",
                "--downloads-per-address", "4", "--body-budget", "8388608",
            ], environment: ["COFFER_RATE_NOTIFICATIONS": "70"])
        #expect(fromFlags["rateNotifications"] as? Int == 1)
        #expect(fromFlags["rateNotificationBurst"] as? Int == 2)
        #expect(fromFlags["downloadStallTimeout"] as? Int == 3)
        #expect(fromFlags["downloadsPerAddress"] as? Int == 4)
        #expect(fromFlags["bodyBudget"] as? Int == 8_388_608)
        for bad in [
            ["--download-stall-timeout", "0"], ["--body-budget", "1000"], ["--downloads-per-address", "-1"], ["--rate-notification-burst", "0"],
        ] {
            #expect(try await CofferExecutable.run(["serve", "--print-config", "--bundle-id", "a"] + bad).status == 2, "\(bad)")
        }
    }
}
