import CofferCore
import CofferTestSupport
import Foundation
import Hummingbird
import HummingbirdTesting
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Two real `coffer serve` processes on one PostgreSQL database (a real server this test
/// process starts) and one data directory: exactly-once and one linear chain across them,
/// an instance killed mid-storm, the database stopped mid-storm.
@Suite(.serialized) struct ScaleOutTests {
    typealias Server = CrashSafetyTests.Server

    /// `count` sandbox receipts for level pack 1 from transaction `first` on, minted with the demo CA
    /// of `data`, as (transaction id, JSON body).
    static func receipts(_ data: URL, first: Int, count: Int) async throws -> [(String, String)] {
        let out = data.deletingLastPathComponent().appendingPathComponent("receipts-\(first)")
        let mint = try await CofferExecutable.run([
            "sandbox", "receipt", "--dir", data.appendingPathComponent("sandbox").path, "--bundle-id", "com.coffer.demo",
            "--purchase", "com.coffer.demo.levelpack1:\(first)", "--count", "\(count)", "--out-dir", out.path,
        ])
        try #require(mint.status == 0, "\(mint.stderr)")
        return try FileManager.default.contentsOfDirectory(atPath: out.path).sorted().map { file in
            let der = try Data(contentsOf: out.appendingPathComponent(file))
            return (String(file.dropLast(4)), "{\"receipt\":\"\(der.base64EncodedString())\"}")
        }
    }

    static func redeem(_ client: TestClient, _ body: String) async throws -> TestClient.Response {
        try await client.execute(.init("/v1/redemptions", method: .post, headers: [.contentType: "application/json"], body: ByteBuffer(string: body)))
    }

    @Test func sixtyFourConcurrentRedemptionsOfOnePurchaseAcrossTwoInstancesGrantOnce() async throws {
        let cluster = try await PostgresCluster.shared()
        let url = try await cluster.createDatabase()
        let root = try makeTemporaryDirectory(prefix: "coffer-scaleout")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("data")
        let a = try await Server(dataDirectory: data, arguments: ["--database", url])
        let b = try await Server(dataDirectory: data, arguments: ["--database", url])
        defer {
            a.kill(SIGKILL)
            b.kill(SIGKILL)
        }
        let body = try #require(try await Self.receipts(data, first: 4242, count: 1).first).1
        let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
            for i in 0..<64 {
                group.addTask {
                    let client = TestClient(host: "127.0.0.1", port: i % 2 == 0 ? a.port : b.port, configuration: .init(timeout: .seconds(30)))
                    client.connect()
                    let status = Int(try await Self.redeem(client, body).status.code)
                    try await client.shutdown()
                    return status
                }
            }
            return try await group.reduce(into: [Int]()) { $0.append($1) }
        }
        #expect(statuses.filter { $0 == 201 }.count == 1, "\(statuses)")
        #expect(statuses.filter { $0 == 409 }.count == 63, "\(statuses)")
        let database = String(url.split(separator: "/").last?.split(separator: "?").first ?? "")
        #expect(try await cluster.psql("SELECT count(*) FROM redemptions", database: database) == "1")
        #expect(
            try await cluster.psql("SELECT count(*) FROM attempts WHERE code = 'alreadyRedeemed'", database: database) == "63",
            "every refusal recorded")
        #expect(
            try await cluster.psql("SELECT count(*) FROM ledger_events WHERE kind <> 'adminAction'", database: database) == "64",
            "one linear chain of 64 entries (after the demo catalogue's admin entries)")
        let verify = try await CofferExecutable.run(["ledger", "verify", "--database", url, "--data-dir", data.path])
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
    }

    /// Hands out receipts to the storm's workers.
    actor Queue {
        var items: [(String, String)]
        var acknowledged: [String] = []
        var statuses: [Int: Int] = [:]
        init(_ items: [(String, String)]) { self.items = items }
        func next() -> (String, String)? { items.popLast() }
        func record(_ id: String, _ status: Int) {
            statuses[status, default: 0] += 1
            if status == 201 { acknowledged.append(id) }
        }
    }

    @Test func sigkillOfOneInstanceMidStormLosesNoAcknowledgedRedemptionAndTheChainVerifies() async throws {
        let cluster = try await PostgresCluster.shared()
        let url = try await cluster.createDatabase()
        let root = try makeTemporaryDirectory(prefix: "coffer-scaleout")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("data")
        let a = try await Server(dataDirectory: data, arguments: ["--database", url, "--checkpoint-every", "50"])
        let b = try await Server(dataDirectory: data, arguments: ["--database", url, "--checkpoint-every", "50"])
        defer {
            a.kill(SIGKILL)
            b.kill(SIGKILL)
        }
        let queue = Queue(try await Self.receipts(data, first: 800_000, count: 500))
        // 16 clients, half on each instance; a client whose instance died moves to the other.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<16 {
                group.addTask {
                    var client = TestClient(host: "127.0.0.1", port: i % 2 == 0 ? a.port : b.port, configuration: .init(timeout: .seconds(30)))
                    client.connect()
                    while let (id, body) = await queue.next() {
                        do {
                            await queue.record(id, Int(try await Self.redeem(client, body).status.code))
                        } catch {
                            try? await client.shutdown()
                            client = TestClient(host: "127.0.0.1", port: b.port, configuration: .init(timeout: .seconds(30)))
                            client.connect()
                        }
                    }
                    try? await client.shutdown()
                }
            }
            group.addTask {
                // Until 120 are acknowledged — or the storm ran dry, which the expectations below report.
                while await queue.acknowledged.count < 120, await !queue.items.isEmpty { try await Task.sleep(for: .milliseconds(5)) }
                a.kill(SIGKILL)
            }
            try await group.waitForAll()
        }
        #expect(try await a.waitForExit(seconds: 10) == SIGKILL)
        let acknowledged = Set(await queue.acknowledged)
        #expect(acknowledged.count > 120)
        let statuses = await queue.statuses
        #expect(Set(statuses.keys).isSubset(of: [201, 409]), "no 5xx from the surviving instance: \(statuses)")
        let database = String(url.split(separator: "/").last?.split(separator: "?").first ?? "")
        let stored = Set(try await cluster.psql("SELECT transaction_id FROM redemptions", database: database).split(separator: "\n").map(String.init))
        #expect(acknowledged.isSubset(of: stored), "lost: \(acknowledged.subtracting(stored).sorted().prefix(10))")
        let verify = try await CofferExecutable.run(["ledger", "verify", "--database", url, "--data-dir", data.path])
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
        // The killed instance comes back on the chain the other one extended.
        let restarted = try await Server(dataDirectory: data, arguments: ["--database", url])
        restarted.kill(SIGTERM)
        #expect(try await restarted.waitForExit(seconds: 20) == 0)
    }

    /// A fresh database on the shared cluster: the cluster, its URL and its name.
    static func database() async throws -> (PostgresCluster, String, String) {
        let cluster = try await PostgresCluster.shared()
        let url = try await cluster.createDatabase()
        return (cluster, url, String(try #require(URLComponents(string: url)).path.dropFirst()))
    }

    /// The data directory's ledger high-water mark, if any.
    static func mark(_ data: URL) throws -> LedgerHighWater? {
        try FileManager.default.contents(atPath: DataDirectory(data.path).ledgerHighWater).map {
            try JSONDecoder().decode(LedgerHighWater.self, from: $0)
        }
    }

    /// `coffer serve` on `data` and `url`, expected to refuse and exit (killed after 30 s if it
    /// starts instead, so a regression fails rather than hangs).
    static func start(_ data: URL, _ url: String) async throws -> CofferExecutable.Run {
        try await CofferExecutable.run(
            ["serve", "--demo", "--data-dir", data.path, "--port", "0", "--content", Server.contentDirectory.path, "--database", url],
            timeout: .seconds(30))
    }

    @Test(
        "a database restored from an older backup is refused at start: the data directory's high-water mark is past its head; deleted on purpose, the instance serves again",
        .timeLimit(.minutes(4)))
    func aDatabaseRestoredFromAnOlderBackupIsRefusedAtStart() async throws {
        let (cluster, url, name) = try await Self.database()
        let root = try makeTemporaryDirectory(prefix: "coffer-highwater")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("data")
        func serve(_ body: (TestClient) async throws -> Void) async throws {
            let server = try await Server(dataDirectory: data, arguments: ["--database", url])
            defer { if server.process.isRunning { server.kill(SIGKILL) } }
            let client = TestClient(host: "127.0.0.1", port: server.port, configuration: .init(timeout: .seconds(30)))
            client.connect()
            try await body(client)
            try await client.shutdown()
            server.kill(SIGTERM)
            #expect(try await server.waitForExit(seconds: 20) == 0)
        }
        var receipts: [(String, String)] = []
        try await serve { client in
            receipts = try await Self.receipts(data, first: 920_000, count: 3)
            let first = try await Self.redeem(client, receipts[0].1)
            #expect(first.status == .created)
        }
        // The backup: a copy of the database as it stands with one redemption.
        try await cluster.psql("CREATE DATABASE \(name)_backup TEMPLATE \(name)")
        try await serve { client in
            for (_, body) in receipts.dropFirst() {
                let later = try await Self.redeem(client, body)
                #expect(later.status == .created)
            }
        }
        let mark = try #require(try Self.mark(data))
        #expect(mark.sequence == Int64(try await cluster.psql("SELECT max(sequence) FROM ledger_events", database: name)))
        // Restored from the backup: the seal agrees with the older chain, the mark does not.
        try await cluster.psql("DROP DATABASE \(name)")
        try await cluster.psql("CREATE DATABASE \(name) TEMPLATE \(name)_backup")
        try await cluster.psql("DROP DATABASE \(name)_backup")
        let refused = try await Self.start(data, url)
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("the ledger ends before entry \(mark.sequence)"), "\(refused.stderr)")
        // The operator checked the ledger and vouches for it: the mark deleted, it serves — and
        // the purchases redeemed after the backup can be redeemed again, as the README says.
        try FileManager.default.removeItem(atPath: DataDirectory(data.path).ledgerHighWater)
        try await serve { client in
            let kept = try await Self.redeem(client, receipts[0].1)
            #expect(kept.status == .conflict, "in the backup")
            let lost = try await Self.redeem(client, receipts[1].1)
            #expect(lost.status == .created, "redeemed after the backup: lost with the restore")
        }
    }

    @Test(
        "a failover that loses commits while the instances run: not ready, the mark never moves onto the forked chain, and the next start is refused",
        .timeLimit(.minutes(4)))
    func aLedgerThatGoesBackWhileRunningIsNotReadyAndNeverRaisesTheMark() async throws {
        let (cluster, url, name) = try await Self.database()
        let root = try makeTemporaryDirectory(prefix: "coffer-highwater")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("data")
        func mark() throws -> LedgerHighWater? { try Self.mark(data) }
        func head() async throws -> Int64 {
            Int64(try await cluster.psql("SELECT coalesce(max(sequence), 0) FROM ledger_events", database: name)) ?? -1
        }
        let server = try await Server(dataDirectory: data, arguments: ["--database", url, "--checkpoint-interval", "1"])
        defer { if server.process.isRunning { server.kill(SIGKILL) } }
        let client = TestClient(host: "127.0.0.1", port: server.port, configuration: .init(timeout: .seconds(30)))
        client.connect()
        defer { Task { try? await client.shutdown() } }
        let receipts = try await Self.receipts(data, first: 930_000, count: 7)
        let first = try await Self.redeem(client, receipts[0].1)
        #expect(first.status == .created)
        // What an asynchronous standby holds, one redemption in: the chain to here and its seal.
        let standbyHead = try await head()
        let standbySeal = try await cluster.psql(
            "SELECT format('%s, %L, %s, %L, %L', sequence, entry_hash, time, key_id, signature) FROM ledger_head", database: name)
        for (_, body) in receipts[1...2] {
            let later = try await Self.redeem(client, body)
            #expect(later.status == .created)
        }
        // The mark follows the head, once a second.
        let reached = try await head()
        let deadline = ContinuousClock.now + .seconds(15)
        while try (mark()?.sequence ?? 0) < reached, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(100)) }
        let before = try #require(try mark())
        #expect(before.sequence == reached)
        #expect(try await client.execute(.init("/readyz", method: .get)).status == .ok)

        // The failover: the promoted standby lacks the last two redemptions — its chain ends
        // where it did then, under the seal it had then (rows and events past it removed, the
        // old seal put back, as a superuser whose session fires no triggers).
        var cut = "SET session_replication_role = replica;"
        for (kind, table) in [
            ("redemption", "redemptions"), ("attempt", "attempts"), ("revocation", "revocations"), ("adminAction", "admin_actions"),
            ("purchaseEvent", "purchase_events"),
        ] {
            cut +=
                " DELETE FROM \(table) WHERE sequence IN (SELECT row_sequence FROM ledger_events WHERE kind = '\(kind)' AND sequence > \(standbyHead));"
        }
        cut += " DELETE FROM ledger_events WHERE sequence > \(standbyHead); DELETE FROM ledger_checkpoints WHERE sequence > \(standbyHead);"
        cut += " UPDATE ledger_head SET (sequence, entry_hash, time, key_id, signature) = (\(standbySeal));"
        try await cluster.psql(cut, database: name)
        // The instance reconnects and appends on the older chain, past the mark's sequence.
        var forked = 0
        let forkDeadline = ContinuousClock.now + .seconds(30)
        for (_, body) in receipts[3...6] {
            // Each until it is redeemed: the first may meet the connections the cut ended.
            var status = try await Self.redeem(client, body).status
            while status != .created, ContinuousClock.now < forkDeadline {
                try await Task.sleep(for: .milliseconds(200))
                status = try await Self.redeem(client, body).status
            }
            if status == .created { forked += 1 }
        }
        let forkedHead = try await head()
        #expect(forked == 4 && forkedHead >= before.sequence, "the forked chain passed the mark: head \(forkedHead)")
        // Not ready; the checkpoint service said why, and left the mark where it was. (A
        // passing notReady while the database reconnects is not the answer waited for.)
        func sealBroken(_ response: TestClient.Response) -> Bool {
            response.status == .serviceUnavailable && String(buffer: response.body ?? ByteBuffer()).contains("\"code\":\"ledgerSealBroken\"")
        }
        var ready = try await client.execute(.init("/readyz", method: .get))
        let readyDeadline = ContinuousClock.now + .seconds(15)
        while !sealBroken(ready), ContinuousClock.now < readyDeadline {
            try await Task.sleep(for: .milliseconds(200))
            ready = try await client.execute(.init("/readyz", method: .get))
        }
        #expect(ready.status == .serviceUnavailable)
        #expect(String(buffer: ready.body ?? ByteBuffer()).contains("\"code\":\"ledgerSealBroken\""))
        // The checkpoint service's own line, not the readiness check's.
        func serviceSaidWhy() -> Bool {
            ((try? String(contentsOf: server.log, encoding: .utf8)) ?? "").split(separator: "\n").contains {
                $0.contains("mark was not raised") && $0.contains("holds another entry \(before.sequence)")
            }
        }
        let logged = ContinuousClock.now + .seconds(15)
        while !serviceSaidWhy(), ContinuousClock.now < logged { try await Task.sleep(for: .milliseconds(100)) }
        #expect(serviceSaidWhy())
        #expect(try mark() == before, "never moved onto the forked chain")
        server.kill(SIGTERM)
        #expect(try await server.waitForExit(seconds: 20) == 0, "the shutdown path ran (its last checkpoint never raises the mark)")
        #expect(try mark() == before)
        let refused = try await Self.start(data, url)
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("the ledger holds another entry \(before.sequence)"), "\(refused.stderr)")
    }

    @Test func theDatabaseStoppedMidStormGives503WithRetryAfterAndTheInstanceRecovers() async throws {
        let cluster = try await PostgresCluster.start()
        defer { try? cluster.destroy() }
        let url = try await cluster.createDatabase()
        let root = try makeTemporaryDirectory(prefix: "coffer-scaleout")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("data")
        let server = try await Server(dataDirectory: data, arguments: ["--database", url])
        defer { server.kill(SIGKILL) }
        let receipts = try await Self.receipts(data, first: 900_000, count: 40)
        let client = TestClient(host: "127.0.0.1", port: server.port, configuration: .init(timeout: .seconds(30)))
        client.connect()
        defer { Task { try? await client.shutdown() } }
        #expect(try await Self.redeem(client, receipts[0].1).status == .created)

        try await cluster.stop()
        let down = try await Self.redeem(client, receipts[1].1)
        #expect(down.status == .serviceUnavailable)
        #expect(down.headers[.retryAfter] != nil)
        #expect(String(buffer: down.body ?? ByteBuffer()).contains("\"code\":\"storageUnavailable\""), "\(String(buffer: down.body ?? ByteBuffer()))")
        #expect(try await client.execute(.init("/readyz", method: .get)).status == .serviceUnavailable, "not ready while the database is down")

        try await cluster.start()
        // The instance reconnects by itself: within a few seconds a new redemption is granted.
        var recovered = false
        for (_, body) in receipts.dropFirst(2) {
            let status = try await Self.redeem(client, body).status
            #expect(status == .created || status == .serviceUnavailable, "\(status)")
            if status == .created {
                recovered = true
                break
            }
            try await Task.sleep(for: .milliseconds(500))
        }
        #expect(recovered)
        let verify = try await CofferExecutable.run(["ledger", "verify", "--database", url, "--data-dir", data.path])
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
    }
}
