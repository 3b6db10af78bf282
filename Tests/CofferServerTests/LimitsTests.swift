import CofferCore
import CofferTestSupport
import Foundation
import Hummingbird
import HummingbirdTesting
import Synchronization
import Testing

@testable import CofferServer

#if canImport(Glibc)
    import Glibc
#endif

/// A raw TCP connection, to behave like clients that well-behaved HTTP clients won't:
/// trickling, stalling, oversized headers.
final class RawConnection: @unchecked Sendable {
    // @unchecked: `fd` is immutable; a test uses one connection from one task at a time
    // (receive hands the descriptor to one reader thread and awaits it).
    let fd: Int32

    init(port: Int) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        try #require(connected == 0, "connect failed")
    }

    /// Sends `text`: at once what the socket takes without waiting, the rest on a thread of its
    /// own, giving up after 30 s without progress. The server under test is often in this
    /// process, and stops reading while its body consumer — a task on the cooperative pool — is
    /// not pulling; a blocking `send` on that pool would wait for the very threads it holds
    /// (two at once and the whole run stops). A short request is sent before this returns, as
    /// tests that open many connections within a server's timeouts need.
    func send(_ text: String) async {
        let bytes = Array(text.utf8)
        let sent = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
        if sent == bytes.count || (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK) { return }
        let rest = Array(bytes[max(0, sent)...])
        await offThePool { self.sendBlocking(rest) }
    }

    /// Sends `text` without waiting; whether the socket took all of it (false once the peer
    /// has reset the connection: EPIPE or ECONNRESET).
    func trySend(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        return bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) } == bytes.count
    }

    /// ``send(_:)`` on the calling thread (never a task's): for a thread of the test's own.
    func sendBlocking(_ text: String) { sendBlocking(Array(text.utf8)) }

    private func sendBlocking(_ bytes: [UInt8]) {
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        _ = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// ``receiveBlocking(seconds:)`` on a thread of its own: a blocking `recv` on the
    /// cooperative pool would starve the server under test.
    func receive(seconds: Int) async -> String {
        await offThePool { self.receiveBlocking(seconds: seconds) }
    }

    /// Reads and discards until the peer closes or `seconds` pass without data; returns the
    /// number of bytes read. As fast as loopback allows: the client a server must not buffer for.
    func drainBlocking(seconds: Int) -> Int {
        var timeout = timeval(tv_sec: seconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var total = 0
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { return total }
            total += n
        }
    }

    /// Whether the peer ends the connection (end of stream or reset) within `seconds`,
    /// discarding whatever else it sends first; false when it stays open.
    func endedByPeer(seconds: Int) async -> Bool {
        await offThePool {
            var timeout = timeval(tv_sec: seconds, tv_usec: 0)
            setsockopt(self.fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let n = buffer.withUnsafeMutableBytes { recv(self.fd, $0.baseAddress, $0.count, 0) }
                if n == 0 { return true }
                if n < 0 { return errno == ECONNRESET }
            }
        }
    }

    /// Reads until the peer closes or `seconds` pass.
    func receiveBlocking(seconds: Int) -> String {
        var timeout = timeval(tv_sec: seconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { break }
            out += buffer[0..<n]
            if String(decoding: out, as: UTF8.self).contains("\r\n\r\n"), out.count > 12 {
                // A complete head; read what else arrives quickly.
                timeout = timeval(tv_sec: 0, tv_usec: 300_000)
                setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    deinit { close(fd) }
}

/// Limits: header sizes, slow request bodies, concurrent uploads, body sizes.
@Suite(.serialized) struct LimitsTests {
    @Test func oversizedHeadersAreRefusedAndTheServerCarriesOn() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        try await h.app.test(.live) { client in
            let port = try #require(client.port)
            let big = try RawConnection(port: port)
            await big.send("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: \(String(repeating: "a", count: 40 * 1024))\r\n\r\n")
            let answer = await big.receive(seconds: 5)
            #expect(answer.isEmpty || answer.hasPrefix("HTTP/1.1 4"), "\(answer.prefix(80))")
            let many = try RawConnection(port: port)
            await many.send("GET /healthz HTTP/1.1\r\nHost: x\r\n" + (0..<200).map { "X-H\($0): v\r\n" }.joined() + "\r\n")
            let manyAnswer = await many.receive(seconds: 5)
            #expect(manyAnswer.isEmpty || manyAnswer.hasPrefix("HTTP/1.1 4"), "\(manyAnswer.prefix(80))")
            // Normal requests are unaffected.
            #expect(try await client.execute(uri: "/healthz", method: .get).status == .ok)
        }
    }

    /// A token works from any address: one purchase's downloads are capped from all of them
    /// together (four times one address's cap), as one address's are, and a slot given back is
    /// free for either.
    @Test func downloadsPerPurchaseAreCappedAcrossAddresses() throws {
        let slots = DownloadSlots(perAddress: 2)
        #expect(slots.perPurchase == 8)
        var held: [DownloadSlot] = []
        for n in 1...4 {
            for _ in 0..<2 { held.append(try slots.acquire("198.51.100.\(n)", redemptionId: "r1").get()) }
        }
        // A fifth address, the same purchase: refused for the purchase, not the address.
        guard case .failure(.purchase) = slots.acquire("198.51.100.5", redemptionId: "r1") else {
            Issue.record("a ninth download of one purchase was given a slot")
            return
        }
        // Another purchase from a full address: refused for the address.
        guard case .failure(.address) = slots.acquire("198.51.100.1", redemptionId: "r2") else {
            Issue.record("a third download from one address was given a slot")
            return
        }
        #expect(slots.inProgress(redemptionId: "r1") == 8 && slots.inProgress() == 8)
        held[0].release()
        held[0].release()  // released once only
        #expect(slots.inProgress(redemptionId: "r1") == 7 && slots.inProgress() == 7)
        #expect((try? slots.acquire("198.51.100.5", redemptionId: "r1").get()) != nil)
    }

    /// The shared ticker of body deadlines expires what is due, never what is not or what was
    /// removed, and starts again after it stopped for want of pending reads.
    @Test func bodyDeadlinesExpireWhatIsDueOnly() async throws {
        let deadlines = BodyDeadlines(tick: .milliseconds(5))
        let fired = Mutex<[Int]>([])
        _ = deadlines.add(.now) { fired.withLock { $0.append(1) } }
        let far = deadlines.add(.now + .seconds(3600)) { fired.withLock { $0.append(2) } }
        let removed = deadlines.add(.now + .seconds(3600)) { fired.withLock { $0.append(3) } }
        deadlines.remove(removed)
        #expect(await eventually(seconds: 30) { fired.withLock { $0 } == [1] })
        #expect(deadlines.count == 1)
        deadlines.remove(far)
        // Nothing pending: the ticker stops; a read added after starts it again.
        #expect(await eventually(seconds: 30) { !deadlines.isTicking })
        _ = deadlines.add(.now) { fired.withLock { $0.append(4) } }
        #expect(await eventually(seconds: 30) { fired.withLock { $0 } == [1, 4] })
    }

    @Test func aSlowBodyGets408WithinTheBodyTimeout() async throws {
        let h = try await Harness.make(configure: {
            $0.bodyTimeoutSeconds = 1
            $0.idleTimeoutSeconds = 300
        })
        defer { h.cleanUp() }
        try await h.app.test(.live) { client in
            let port = try #require(client.port)
            let slow = try RawConnection(port: port)
            await slow.send(
                "POST /v1/redemptions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"receipt\":\"")
            let started = ContinuousClock.now
            let answer = await slow.receive(seconds: 10)
            #expect(answer.hasPrefix("HTTP/1.1 408"), "\(answer.prefix(120))")
            #expect(answer.contains("requestTimeout"))
            #expect(answer.lowercased().contains("\r\nconnection: close\r\n"))
            #expect(ContinuousClock.now - started < .seconds(8))
            // As the answer says: the connection ends (it is not kept waiting for the body).
            #expect(await slow.endedByPeer(seconds: 20))
            #expect(try await client.execute(uri: "/healthz", method: .get).status == .ok)
        }
    }

    /// An answer sent before its request's body was read — a 401 to an upload without a key —
    /// ends the connection, the rest of the body unread: a client cannot hold the connection by
    /// sending a body it never finishes. A body sent whole first keeps the connection.
    @Test func anAnswerBeforeTheBodyEndsTheConnection() async throws {
        let h = try await Harness.make(configure: { $0.idleTimeoutSeconds = 300 })
        defer { h.cleanUp() }
        try await h.app.test(.live) { client in
            let port = try #require(client.port)
            let upload = try RawConnection(port: port)
            await upload.send(
                "PUT /v1/admin/assets/big HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n" + String(repeating: "x", count: 1000))
            let answer = await upload.receive(seconds: 10)
            #expect(answer.hasPrefix("HTTP/1.1 401"), "\(answer.prefix(120))")
            #expect(answer.lowercased().contains("\r\nconnection: close\r\n"), "\(answer.prefix(400))")
            #expect(await upload.endedByPeer(seconds: 20))
            // A client that sends its body on before it reads the answer (as many do) is read
            // from while it sends — not cut off 2 s after the answer, its answer lost to a reset.
            let steady = try RawConnection(port: port)
            await steady.send("PUT /v1/admin/assets/big HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n")
            // On a thread of its own: a busy cooperative pool would stretch the pauses past 2 s.
            let sent = await offThePool {
                (0..<12).filter { _ in
                    usleep(300_000)
                    return steady.trySend(String(repeating: "x", count: 1000))
                }.count
            }
            #expect(sent == 12, "the connection was closed while the client still sent")
            let late = await steady.receive(seconds: 10)
            #expect(late.hasPrefix("HTTP/1.1 401"), "\(late.prefix(120))")
            #expect(await steady.endedByPeer(seconds: 20), "closed once the client paused")
            // A whole request refused the same way leaves its connection open for the next.
            let whole = try RawConnection(port: port)
            await whole.send("PUT /v1/admin/assets/small HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
            let first = await whole.receive(seconds: 10)
            #expect(first.hasPrefix("HTTP/1.1 401") && !first.lowercased().contains("connection: close"), "\(first.prefix(400))")
            await whole.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(await whole.receive(seconds: 10).hasPrefix("HTTP/1.1 200"))
            #expect(try await client.execute(uri: "/healthz", method: .get).status == .ok)
        }
    }

    /// Slowloris: headers trickled a byte at a time never complete a request part, so the
    /// idle timeout closes the connection.
    @Test func trickledHeadersCannotPinAConnection() async throws {
        let h = try await Harness.make(configure: { $0.idleTimeoutSeconds = 1 })
        defer { h.cleanUp() }
        try await h.app.test(.live) { client in
            let port = try #require(client.port)
            let slow = try RawConnection(port: port)
            let started = ContinuousClock.now
            await slow.send("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            // A byte every 400 ms for 10 s while the answer is awaited (trySend: never blocks,
            // and the receive runs on a thread of its own): a timer that each byte reset would
            // keep the connection open all that time.
            let trickle = Task {
                for _ in 0..<25 {
                    try? await Task.sleep(for: .milliseconds(400))
                    if !slow.trySend("a") { return }
                }
            }
            let answer = await slow.receive(seconds: 15)
            let open = ContinuousClock.now - started
            trickle.cancel()
            #expect(!answer.hasPrefix("HTTP/1.1 200"), "\(answer.prefix(80))")
            #expect(open < .seconds(6), "closed by the idle timeout while bytes kept coming, not pinned: \(open)")
            // A prompt client is served (the test client's own idle connection is closed too).
            // With the whole suite running, a starved loop can let the 1 s idle limit close a
            // prompt connection before reading it: three tries, any answered.
            var served = false
            for _ in 0..<3 where !served {
                let prompt = try RawConnection(port: port)
                await prompt.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                served = await prompt.receive(seconds: 5).hasPrefix("HTTP/1.1 200")
            }
            #expect(served)
        }
    }

    /// An admin upload of `length` bytes to `asset` with its first 5,000 sent, once it holds an
    /// upload slot (a condition, not a guess at how long that takes).
    static func stalledUpload(_ h: Harness, port: Int, asset: String, length: Int) async throws -> RawConnection {
        let stalled = try RawConnection(port: port)
        await stalled.send(
            "PUT /v1/admin/assets/\(asset) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(h.adminKey)\r\nContent-Length: \(length)\r\n\r\n"
                + String(repeating: "x", count: 5000))
        let deadline = ContinuousClock.now + .seconds(20)
        while h.runtime.uploadsInProgress == 0 && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        #expect(h.runtime.uploadsInProgress == 1)
        return stalled
    }

    @Test func tooManyConcurrentUploadsGet503() async throws {
        let h = try await Harness.make(configure: { $0.maxConcurrentUploads = 1 })
        defer { h.cleanUp() }
        try await h.app.test(.live) { client in
            let port = try #require(client.port)
            // One upload in progress, stalled half-way.
            let stalled = try await Self.stalledUpload(h, port: port, asset: "big", length: 100_000)
            let second = try await client.execute(
                uri: "/v1/admin/assets/other", method: .put, headers: h.bearer(h.adminKey), body: ByteBuffer(string: "small"))
            #expect(second.status == .serviceUnavailable)
            #expect(Harness.code(second) == "uploadsBusy")
            #expect(second.headers[.retryAfter] == "5")
            // When the first finishes, the slot is free again.
            await stalled.send(String(repeating: "x", count: 95000))
            let done = await stalled.receive(seconds: 10)
            #expect(done.hasPrefix("HTTP/1.1 201"), "\(done.prefix(120))")
            let third = try await client.execute(
                uri: "/v1/admin/assets/other", method: .put, headers: h.bearer(h.adminKey), body: ByteBuffer(string: "small"))
            #expect(third.status == .created)
        }
    }

    /// A key is checked when a request begins, and an upload lasts as long as its client keeps
    /// sending: one revoked meanwhile (a leaked key being contained) adds no asset version.
    @Test func anUploadWhoseKeyIsRevokedMeanwhileMakesNoVersion() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let admin = try #require(try await h.services.keys.key(secretHash: APIKeys.hash(h.adminKey)))
        try await h.app.test(.live) { client in
            let port = try #require(client.port)
            let stalled = try await Self.stalledUpload(h, port: port, asset: "level-1", length: 10_000)
            #expect(try await h.services.keys.revoke(keyId: admin.keyId, at: Date()))
            await stalled.send(String(repeating: "x", count: 5000))
            let done = await stalled.receive(seconds: 10)
            #expect(done.hasPrefix("HTTP/1.1 401"), "\(done.prefix(200))")
            #expect(done.contains("revoked during the upload"), "\(done.prefix(400))")
            let asset = try await h.services.catalogue.asset("level-1")
            #expect(asset?.size == Int64(h.levelBytes.count), "a version was added: \(String(describing: asset))")
        }
    }

    @Test func declaredOversizedBodiesAreRefusedBeforeReading() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        try await h.app.test(.live) { client in
            let port = try #require(client.port)
            let c = try RawConnection(port: port)
            await c.send("POST /v1/grants/tokens HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n{")
            let answer = await c.receive(seconds: 5)
            #expect(answer.hasPrefix("HTTP/1.1 413"), "\(answer.prefix(120))")
            #expect(answer.contains("payloadTooLarge"))
        }
    }
}
