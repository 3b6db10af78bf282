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
    static func receipts(_ data: URL, first: Int, count: Int) throws -> [(String, String)] {
        let out = data.deletingLastPathComponent().appendingPathComponent("receipts-\(first)")
        let mint = try CofferExecutable.run([
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
        let cluster = try PostgresCluster.shared()
        let url = try cluster.createDatabase()
        let root = try makeTemporaryDirectory(prefix: "coffer-scaleout")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("data")
        let a = try await Server(dataDirectory: data, arguments: ["--database", url])
        let b = try await Server(dataDirectory: data, arguments: ["--database", url])
        defer {
            a.kill(SIGKILL)
            b.kill(SIGKILL)
        }
        let body = try #require(try Self.receipts(data, first: 4242, count: 1).first).1
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
        #expect(try cluster.psql("SELECT count(*) FROM redemptions", database: database) == "1")
        #expect(
            try cluster.psql("SELECT count(*) FROM attempts WHERE code = 'alreadyRedeemed'", database: database) == "63", "every refusal recorded")
        #expect(try cluster.psql("SELECT count(*) FROM ledger_events", database: database) == "64", "one linear chain of 64 entries")
        let verify = try CofferExecutable.run(["ledger", "verify", "--database", url, "--data-dir", data.path])
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
        let cluster = try PostgresCluster.shared()
        let url = try cluster.createDatabase()
        let root = try makeTemporaryDirectory(prefix: "coffer-scaleout")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("data")
        let a = try await Server(dataDirectory: data, arguments: ["--database", url, "--checkpoint-every", "50"])
        let b = try await Server(dataDirectory: data, arguments: ["--database", url, "--checkpoint-every", "50"])
        defer {
            a.kill(SIGKILL)
            b.kill(SIGKILL)
        }
        let queue = Queue(try Self.receipts(data, first: 800_000, count: 500))
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
        let stored = Set(try cluster.psql("SELECT transaction_id FROM redemptions", database: database).split(separator: "\n").map(String.init))
        #expect(acknowledged.isSubset(of: stored), "lost: \(acknowledged.subtracting(stored).sorted().prefix(10))")
        let verify = try CofferExecutable.run(["ledger", "verify", "--database", url, "--data-dir", data.path])
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
        // The killed instance comes back on the chain the other one extended.
        let restarted = try await Server(dataDirectory: data, arguments: ["--database", url])
        restarted.kill(SIGTERM)
        #expect(try await restarted.waitForExit(seconds: 20) == 0)
    }

    @Test func theDatabaseStoppedMidStormGives503WithRetryAfterAndTheInstanceRecovers() async throws {
        let cluster = try PostgresCluster.start()
        defer { try? cluster.destroy() }
        let url = try cluster.createDatabase()
        let root = try makeTemporaryDirectory(prefix: "coffer-scaleout")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("data")
        let server = try await Server(dataDirectory: data, arguments: ["--database", url])
        defer { server.kill(SIGKILL) }
        let receipts = try Self.receipts(data, first: 900_000, count: 40)
        let client = TestClient(host: "127.0.0.1", port: server.port, configuration: .init(timeout: .seconds(30)))
        client.connect()
        defer { Task { try? await client.shutdown() } }
        #expect(try await Self.redeem(client, receipts[0].1).status == .created)

        try cluster.stop()
        let down = try await Self.redeem(client, receipts[1].1)
        #expect(down.status == .serviceUnavailable)
        #expect(down.headers[.retryAfter] != nil)
        #expect(String(buffer: down.body ?? ByteBuffer()).contains("\"code\":\"storageUnavailable\""), "\(String(buffer: down.body ?? ByteBuffer()))")
        #expect(try await client.execute(.init("/readyz", method: .get)).status == .serviceUnavailable, "not ready while the database is down")

        try cluster.start()
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
        let verify = try CofferExecutable.run(["ledger", "verify", "--database", url, "--data-dir", data.path])
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
    }
}
