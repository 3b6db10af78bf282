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

/// The real `coffer serve` process, killed with SIGKILL mid-storm and mid-upload, then
/// restarted on the same data directory; and stopped with SIGTERM mid-request.
@Suite(.serialized, .timeLimit(.minutes(10))) struct CrashSafetyTests {
    /// A `coffer serve --demo` child process on a free port.
    final class Server: @unchecked Sendable {
        // @unchecked: `process`, `port`, `adminKey` and `log` are set once in init and
        // never mutated; Process is only signalled and waited on.
        let process: Process
        let port: Int
        let adminKey: String
        let log: URL

        init(dataDirectory: URL, arguments extra: [String] = [], environment: [String: String] = [:]) async throws {
            log = dataDirectory.deletingLastPathComponent().appendingPathComponent("serve-\(UUID().uuidString).log")
            _ = FileManager.default.createFile(atPath: log.path, contents: nil)
            let handle = try FileHandle(forWritingTo: log)
            process = Process()
            process.executableURL = try CofferExecutable.url
            process.arguments =
                [
                    "serve", "--demo", "--data-dir", dataDirectory.path, "--port", "0", "--content", Self.contentDirectory.path, "--rate-redemptions",
                    "0",
                ] + extra
            process.standardOutput = handle
            process.standardError = handle
            if !environment.isEmpty { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
            try process.run()
            var found: (Int, String)?
            // Up to 60 s (a debug build makes the demo's RSA CA on a busy machine), no longer
            // than the child lives.
            for _ in 0..<600 {
                let text = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
                if let range = text.range(of: "Server started and listening on 127.0.0.1:"),
                    let port = Int(text[range.upperBound...].prefix { $0.isNumber }),
                    let keyRange = text.range(of: "admin key:   ")
                {
                    found = (port, String(text[keyRange.upperBound...].prefix { !$0.isWhitespace }))
                    break
                }
                if !process.isRunning { break }
                do { try await Task.sleep(for: .milliseconds(100)) } catch {
                    Server.reap(process)
                    throw error
                }
            }
            // Not started in time: stop the child so the failing #require below cannot leak it.
            if found == nil { Server.reap(process) }
            let (port, key) = try #require(found, "the server did not start: \((try? String(contentsOf: log, encoding: .utf8)) ?? "")")
            self.port = port
            self.adminKey = key
        }

        static var contentDirectory: URL {
            URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
                .appendingPathComponent("content")
        }

        func kill(_ signal: Int32) { Glibc.kill(process.processIdentifier, signal) }

        /// Kills the child if it still runs and waits for its exit: for a `defer`, so that a
        /// failing `#require` (or a test's time limit) cannot leak a running server.
        func stop() { Server.reap(process) }

        static func reap(_ process: Process) {
            guard process.isRunning else { return }
            Glibc.kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }

        func waitForExit(seconds: Int) async throws -> Int32 {
            for _ in 0..<(seconds * 20) where process.isRunning { try await Task.sleep(for: .milliseconds(50)) }
            try #require(!process.isRunning, "the server did not exit")
            return process.terminationStatus
        }
    }

    /// Hands out receipts to the storm's workers.
    actor Queue {
        var items: [(String, String)]
        var acknowledged: [String] = []
        /// Workers still redeeming: each one stops when the queue is empty or its client fails.
        var working = 0
        init(_ items: [(String, String)]) { self.items = items }
        func next() -> (String, String)? { items.popLast() }
        func acknowledge(_ id: String) { acknowledged.append(id) }
        func started() { working += 1 }
        func stopped() { working -= 1 }
    }

    @Test func sigkillDuringARedemptionStormLosesNoAcknowledgedRedemption() async throws {
        let root = try makeTemporaryDirectory(prefix: "coffer-crash")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("data")
        let server = try await Server(dataDirectory: data)
        defer { server.stop() }
        // 600 unique sandbox receipts, minted with the server's own demo CA.
        let receipts = root.appendingPathComponent("receipts")
        let mint = try await CofferExecutable.run([
            "sandbox", "receipt", "--dir", data.appendingPathComponent("sandbox").path, "--bundle-id", "com.coffer.demo",
            "--purchase", "com.coffer.demo.levelpack1:700000", "--count", "600", "--out-dir", receipts.path,
        ])
        try #require(mint.status == 0)
        var items: [(String, String)] = []
        for file in try FileManager.default.contentsOfDirectory(atPath: receipts.path) {
            let der = try Data(contentsOf: receipts.appendingPathComponent(file))
            items.append((String(file.dropLast(4)), "{\"receipt\":\"\(der.base64EncodedString())\"}"))
        }
        let queue = Queue(items)
        let port = server.port
        // 16 clients redeem as fast as they can; the server is killed once 150 were acknowledged.
        for _ in 0..<16 { await queue.started() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<16 {
                group.addTask {
                    let client = TestClient(host: "127.0.0.1", port: port, configuration: .init(timeout: .seconds(10)))
                    client.connect()
                    defer { Task { try? await client.shutdown() } }
                    while let (id, body) = await queue.next() {
                        guard
                            let response = try? await client.execute(
                                .init("/v1/redemptions", method: .post, headers: [.contentType: "application/json"], body: ByteBuffer(string: body)))
                        else { break }
                        if response.status == .created { await queue.acknowledge(id) }
                    }
                    await queue.stopped()
                }
            }
            group.addTask {
                // Until 150 are acknowledged — unless every worker stopped or the deadline passed,
                // which fails the test here instead of hanging it.
                let deadline = ContinuousClock.now + .seconds(120)
                while await queue.acknowledged.count < 150, await queue.working > 0, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(5))
                }
                let count = await queue.acknowledged.count
                if count < 150, await queue.working > 0 {
                    Issue.record("only \(count) of 150 redemptions acknowledged within 120 s")
                } else if count < 150 {
                    Issue.record("every worker stopped (queue empty or a client error) after \(count) of 150 acknowledgements")
                }
                server.kill(SIGKILL)
            }
            try await group.waitForAll()
        }
        #expect(try await server.waitForExit(seconds: 10) == SIGKILL)
        let acknowledged = Set(await queue.acknowledged)
        #expect(acknowledged.count >= 150)
        #expect(await queue.items.count > 0, "killed mid-storm, not after it")

        // Restart: every acknowledged redemption is in the ledger, and the chain verifies.
        let restarted = try await Server(dataDirectory: data)
        defer { restarted.stop() }
        let db = try DatabaseQueue(path: data.appendingPathComponent("coffer.sqlite").path)
        let stored = Set(try await db.read { try String.fetchAll($0, sql: "SELECT transaction_id FROM redemptions") })
        #expect(acknowledged.isSubset(of: stored), "lost: \(acknowledged.subtracting(stored).sorted().prefix(10))")
        let verify = try await CofferExecutable.run(["ledger", "verify", "--data-dir", data.path])
        #expect(verify.status == 0, "\(verify.stdout)")
        restarted.kill(SIGTERM)
        #expect(try await restarted.waitForExit(seconds: 20) == 0)
    }

    @Test func sigkillDuringALargeUploadLeavesNoPartialAsset() async throws {
        let root = try makeTemporaryDirectory(prefix: "coffer-crash")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("data")
        let server = try await Server(dataDirectory: data)
        defer { server.stop() }
        let connection = try RawConnection(port: server.port)
        await connection.send(
            "PUT /v1/admin/assets/big-level HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(server.adminKey)\r\nContent-Length: 67108864\r\n\r\n")
        let chunk = String(repeating: "z", count: 1 << 20)
        for _ in 0..<24 { await connection.send(chunk) }
        let temporary = data.appendingPathComponent("content/tmp")
        var partial: [String] = []
        for _ in 0..<100 {
            partial = (try? FileManager.default.contentsOfDirectory(atPath: temporary.path)) ?? []
            if !partial.isEmpty { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(!partial.isEmpty, "the upload was being written to a temporary file")
        server.kill(SIGKILL)
        #expect(try await server.waitForExit(seconds: 10) == SIGKILL)

        let restarted = try await Server(dataDirectory: data)
        defer { restarted.stop() }
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: temporary.path)) ?? []).isEmpty, "temporary files cleaned at start")
        let log = (try? String(contentsOf: restarted.log, encoding: .utf8)) ?? ""
        #expect(log.contains("partial upload"), "the clean-up is logged")
        let client = TestClient(host: "127.0.0.1", port: restarted.port, configuration: .init(timeout: .seconds(10)))
        client.connect()
        let asset = try await client.execute(
            .init("/v1/admin/assets/big-level", method: .get, headers: [.authorization: "Bearer \(restarted.adminKey)"]))
        #expect(asset.status == .notFound, "no partial asset is visible")
        try await client.shutdown()
        restarted.kill(SIGTERM)
        #expect(try await restarted.waitForExit(seconds: 20) == 0)
    }

    @Test func sigtermLetsInFlightRequestsFinishAndClosesTheDatabase() async throws {
        let root = try makeTemporaryDirectory(prefix: "coffer-crash")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("data")
        let server = try await Server(dataDirectory: data)
        defer { server.stop() }
        // A redemption so the ledger has an entry after the last periodic checkpoint.
        let receipt = try await CofferExecutable.run([
            "sandbox", "receipt", "--dir", data.appendingPathComponent("sandbox").path, "--bundle-id", "com.coffer.demo",
            "--purchase", "com.coffer.demo.levelpack1:800000", "--base64",
        ])
        let client = TestClient(host: "127.0.0.1", port: server.port, configuration: .init(timeout: .seconds(10)))
        client.connect()
        let redeemed = try await client.execute(
            .init(
                "/v1/redemptions", method: .post, headers: [.contentType: "application/json"],
                body: ByteBuffer(string: "{\"receipt\":\"\(receipt.stdout.trimmingCharacters(in: .whitespacesAndNewlines))\"}")))
        #expect(redeemed.status == .created)
        try await client.shutdown()

        // An upload in flight when SIGTERM arrives still completes.
        let connection = try RawConnection(port: server.port)
        let size = 8 << 20
        await connection.send(
            "PUT /v1/admin/assets/late HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(server.adminKey)\r\nContent-Length: \(size)\r\n\r\n")
        await connection.send(String(repeating: "q", count: size / 2))
        // Wait until the upload is being written (its temporary file exists), not a guessed delay.
        let temporary = data.appendingPathComponent("content/tmp")
        for _ in 0..<400 {
            if !((try? FileManager.default.contentsOfDirectory(atPath: temporary.path)) ?? []).isEmpty { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(!((try? FileManager.default.contentsOfDirectory(atPath: temporary.path)) ?? []).isEmpty, "the upload is in flight")
        server.kill(SIGTERM)
        try await Task.sleep(for: .milliseconds(300))
        await connection.send(String(repeating: "q", count: size / 2))
        let answer = await connection.receive(seconds: 15)
        #expect(answer.hasPrefix("HTTP/1.1 201"), "\(answer.prefix(120))")
        #expect(try await server.waitForExit(seconds: 20) == 0)
        let log = (try? String(contentsOf: server.log, encoding: .utf8)) ?? ""
        #expect(log.contains("Coffer stopped"))
        // Closed cleanly: the WAL was checkpointed into the database file, and the last
        // ledger entry is covered by a checkpoint signed at shutdown.
        let wal = data.appendingPathComponent("coffer.sqlite-wal").path
        let walSize = (try? FileManager.default.attributesOfItem(atPath: wal)[.size] as? Int) ?? 0
        #expect(walSize == 0, "WAL left with \(walSize) bytes")
        let db = try DatabaseQueue(path: data.appendingPathComponent("coffer.sqlite").path)
        let (head, checkpoint, seeded) = try await db.read {
            (
                try Int64.fetchOne($0, sql: "SELECT MAX(sequence) FROM ledger_events"),
                try Int64.fetchOne($0, sql: "SELECT MAX(sequence) FROM ledger_checkpoints"),
                try Int64.fetchOne($0, sql: "SELECT COUNT(*) FROM admin_actions WHERE key_id = 'demo'") ?? 0
            )
        }
        #expect(seeded > 0, "the demo's catalogue is in the admin log")
        #expect(head == seeded + 2, "the demo catalogue's entries, the redemption and the upload's admin action")
        #expect(checkpoint == head)
        #expect(try await db.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM assets WHERE asset_id = 'late'") } == 1)
    }
}
