import CofferApp
import CofferCore
import CofferPostgres
import CofferServer
import CofferTestSupport
import Foundation
import GRDB
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `coffer ledger copy --from-data-dir D --to-database URL`: the upgrade from one SQLite box to
/// PostgreSQL. Everything the box recorded — redemptions, refused attempts, revocations, the
/// admin log, checkpoints, the seal, API keys, the catalogue — arrives as it was: the copy is
/// the same chain (same entries, same head), it verifies with the same public key, and
/// instances started on it keep serving it (replays stay refused, the keys stay valid).
@Suite struct LedgerCopyTests {
    typealias Server = CrashSafetyTests.Server

    /// `coffer ledger verify …` of `source`: its report's first two lines (intact, entries and head).
    static func verified(_ source: [String], data: URL) async throws -> String {
        let verify = try await CofferExecutable.run(["ledger", "verify"] + source + ["--data-dir", data.path])
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
        return verify.stdout.split(separator: "\n").prefix(2).joined(separator: "\n")
    }

    @Test func aSQLiteLedgerCopiedIntoPostgreSQLIsTheSameChainAndServesOn() async throws {
        let root = try makeTemporaryDirectory(prefix: "coffer-copy")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("data")

        // 1. One box on SQLite: three redemptions, a replay refused, a refund, checkpoints every 2 entries.
        let sqlite = try await Server(dataDirectory: data, arguments: ["--checkpoint-every", "2"])
        defer { sqlite.kill(SIGKILL) }
        let minted = try await ScaleOutTests.receipts(data, first: 7100, count: 4)
        do {
            let client = ObjectStoreScaleOutTests.client(sqlite)
            for (id, body) in minted.prefix(3) {
                #expect(try await ScaleOutTests.redeem(client, body).status == .created, "\(id)")
            }
            #expect(try await ScaleOutTests.redeem(client, minted[0].1).status == .conflict)
            let refund = try await PostgresRolesTests.notify(client, data: data, type: "REFUND", transactionId: minted[2].0)
            #expect(refund.status == .ok)
            try await client.shutdown()
        }
        sqlite.kill(SIGTERM)
        #expect(try await sqlite.waitForExit(seconds: 30) == 0)
        let created = try await CofferExecutable.run([
            "keys", "create", "--data-dir", data.path, "--role", "auditor", "--name", "auditor before the copy",
        ])
        try #require(created.status == 0, "\(created.stderr)")
        let auditorKey = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let before = try await Self.verified([], data: data)
        #expect(before.hasPrefix("ledger intact"), "\(before)")

        // A bucket's pin (this box serves local files: none of its own), to be copied too.
        let pinned = try DatabaseQueue(path: data.appendingPathComponent("coffer.sqlite").path)
        try await pinned.write { db in
            try db.execute(
                sql: "INSERT INTO content_pins (location, sha256, tag, pinned_at) VALUES ('127.0.0.1:9000 s3://game', ?, 'etag-1', 1.5)",
                arguments: [String(repeating: "e", count: 64)])
        }
        try pinned.close()

        // 2. The copy: the same chain, verified with the same key.
        let cluster = try await PostgresCluster.shared()
        let url = try await cluster.createDatabase()
        let database = String(url.split(separator: "/").last?.split(separator: "?").first ?? "")
        let copy = try await CofferExecutable.run(["ledger", "copy", "--from-data-dir", data.path, "--to-database", url])
        #expect(copy.status == 0, "\(copy.stdout)\(copy.stderr)")
        #expect(try await Self.verified(["--database", url], data: data) == before, "the same entries and head")
        // Every table the copy moves, counted on both sides.
        let tables = [
            "redemptions", "attempts", "revocations", "admin_actions", "ledger_events", "ledger_checkpoints", "ledger_head", "api_keys", "products",
            "assets", "purchase_events", "deliveries", "content_pins",
        ]
        let query = "SELECT " + tables.map { "(SELECT count(*) FROM \($0))" }.joined(separator: " || ' ' || ")
        let source = try DatabaseQueue(
            path: data.appendingPathComponent("coffer.sqlite").path,
            configuration: {
                var c = Configuration(); c.readonly = true; return c
            }())
        let boxCounts = try await source.read { db in try String.fetchOne(db, sql: query) }
        try source.close()
        #expect(boxCounts?.hasPrefix("3 1 1 ") == true, "redemptions, attempts, revocations on the box: \(boxCounts ?? "")")
        #expect(try await cluster.psql(query, database: database) == boxCounts, "\(tables)")
        #expect(
            try await cluster.psql("SELECT count(*) FROM api_keys WHERE signature IS NOT NULL", database: database) == "3",
            "the keys and their signatures")
        // Into a database that already holds a ledger: refused, nothing written.
        let again = try await CofferExecutable.run(["ledger", "copy", "--from-data-dir", data.path, "--to-database", url])
        #expect(again.status != 0, "\(again.stdout)")
        #expect(try await cluster.psql("SELECT count(*) FROM redemptions", database: database) == "3")

        // 3. An instance on the copy, with the same data directory (its keys): replays of what the
        // box redeemed stay refused, a new purchase extends the same chain, the keys still work.
        let pg = try await Server(dataDirectory: data, arguments: ["--database", url])
        defer { pg.kill(SIGKILL) }
        let client = ObjectStoreScaleOutTests.client(pg)
        #expect(try await ScaleOutTests.redeem(client, minted[0].1).status == .conflict, "redeemed on the box")
        #expect(try await ScaleOutTests.redeem(client, minted[2].1).status != .created, "refunded on the box")
        #expect(try await ScaleOutTests.redeem(client, minted[3].1).status == .created)
        for key in [auditorKey, pg.adminKey] {
            let whoami = try await client.execute(.init("/v1/whoami", method: .get, headers: [.authorization: "Bearer \(key)"]))
            #expect(whoami.status == .ok, "a key made on the box, signed by the same ledger key")
        }
        try await client.shutdown()
        let after = try await Self.verified(["--database", url], data: data)
        #expect(after.hasPrefix("ledger intact") && after != before, "\(after)")

        // 4. The owner role gives level pack 1 the season's assets too: named by verify, until
        // an operator vouches for it (`adopt --database`, logged, while the instance runs).
        _ = try await cluster.psql(
            "UPDATE products SET asset_ids = asset_ids || ARRAY['season1-levels'] WHERE product_id = 'com.coffer.demo.levelpack1'", database: database
        )
        // The running instance stops handing the row out once its cache reads it again (within
        // its 2 s): 503, the purchase not used up. An instance starting now does not start.
        let fresh = try await ScaleOutTests.receipts(data, first: 7200, count: 30)
        let served = ObjectStoreScaleOutTests.client(pg)
        var refusedBody: String?
        for (_, body) in fresh {
            let response = try await ScaleOutTests.redeem(served, body)
            if response.status == .serviceUnavailable {
                #expect(response.headers[.retryAfter] != nil)
                refusedBody = body
                break
            }
            #expect(response.status == .created, "the row as the instance read it before the change")
            try await Task.sleep(for: .milliseconds(500))
        }
        let refusedPurchase = try #require(refusedBody, "still served 15 s after the change")
        var configuration = CofferConfiguration()
        configuration.dataDirectory = data.path
        let start = await #expect(throws: LedgerStartupError.self) {
            let storage = try await PostgresStorage.open(configuration, url: try PostgresURL(url), logger: Logger(label: "test"))
            try await storage.close()
        }
        #expect("\(start.map { "\($0)" } ?? "")".contains("productChanged: product com.coffer.demo.levelpack1"), "\(String(describing: start))")
        let named = try await CofferExecutable.run(["ledger", "verify", "--database", url, "--data-dir", data.path])
        #expect(named.status == 1)
        #expect(named.stdout.contains("catalogue: productChanged: product com.coffer.demo.levelpack1 is bundle com.coffer.demo"), "\(named.stdout)")
        #expect(
            try await CofferExecutable.run(["ledger", "adopt", "--database", url, "--data-dir", data.path, "--reseal"]).status == 2,
            "--reseal is for SQLite")
        // Not while an admin-log row is edited behind the chain's back: its rows are replayed.
        let keyName = try await cluster.psql("SELECT key_name FROM admin_actions WHERE sequence = 1", database: database)
        _ = try await cluster.psql(
            "ALTER TABLE admin_actions DISABLE TRIGGER admin_actions_append_only; UPDATE admin_actions SET key_name = 'someone else' WHERE sequence = 1",
            database: database)
        let refused = try await CofferExecutable.run(["ledger", "adopt", "--database", url, "--data-dir", data.path])
        #expect(refused.status == 1 && refused.stdout.contains("refused: the chain itself does not verify"), "\(refused.stdout)\(refused.stderr)")
        _ = try await cluster.psql(
            "UPDATE admin_actions SET key_name = '\(keyName.replacingOccurrences(of: "'", with: "''"))' WHERE sequence = 1; ALTER TABLE admin_actions ENABLE TRIGGER admin_actions_append_only",
            database: database)
        let adopted = try await CofferExecutable.run(["ledger", "adopt", "--database", url, "--data-dir", data.path])
        #expect(adopted.status == 0, "\(adopted.stdout)\(adopted.stderr)")
        #expect(adopted.stdout.contains("vouched for the catalogue: 1 productChanged"), "\(adopted.stdout)")
        #expect(try await ScaleOutTests.redeem(served, refusedPurchase).status == .created, "vouched for: served, while the instance runs")
        try await served.shutdown()
        let vouched = try await Self.verified(["--database", url], data: data)
        #expect(vouched.hasPrefix("ledger intact"), "\(vouched)")
        #expect(
            try await cluster.psql("SELECT action FROM admin_actions ORDER BY sequence DESC LIMIT 2", database: database)
                == "ledger.adopt\nproduct.put")
    }

    /// A box's older ledger — a backup restored over the newer one, which verifies on its own —
    /// is refused by the copy as `serve` refuses it: it is behind the data directory's
    /// high-water mark. Nothing reaches the database.
    @Test func aLedgerBehindItsHighWaterMarkIsNotCopied() async throws {
        let root = try makeTemporaryDirectory(prefix: "coffer-copy-behind")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("data")
        let file = data.appendingPathComponent("coffer.sqlite")
        let backup = root.appendingPathComponent("backup.sqlite")
        var minted: [(String, String)] = []
        for index in 0..<2 {
            let box = try await Server(dataDirectory: data)
            defer { box.stop() }
            // The receipts, once the demo made its sandbox CA.
            if minted.isEmpty { minted = try await ScaleOutTests.receipts(data, first: 7300, count: 2) }
            let (id, body) = minted[index]
            let client = ObjectStoreScaleOutTests.client(box)
            #expect(try await ScaleOutTests.redeem(client, body).status == .created, "\(id)")
            try await client.shutdown()
            box.kill(SIGTERM)
            #expect(try await box.waitForExit(seconds: 30) == 0)
            if index == 0 { try FileManager.default.copyItem(at: file, to: backup) }
        }
        // The older ledger put back (stopped cleanly, it is all in the main file).
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: file.path + suffix) }
        try FileManager.default.copyItem(at: backup, to: file)
        #expect(try await Self.verified([], data: data).hasPrefix("ledger intact"), "the backup verifies on its own")
        let cluster = try await PostgresCluster.shared()
        let url = try await cluster.createDatabase()
        let database = String(url.split(separator: "/").last?.split(separator: "?").first ?? "")
        let copy = try await CofferExecutable.run(["ledger", "copy", "--from-data-dir", data.path, "--to-database", url])
        #expect(copy.status == 1, "\(copy.stdout)\(copy.stderr)")
        #expect(copy.stdout.contains("refused:") && copy.stdout.contains("high-water"), "\(copy.stdout)")
        // Refused before the target was touched: not even migrated.
        #expect(try await cluster.psql("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'", database: database) == "0")
    }
}
