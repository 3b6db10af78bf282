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
import NIOCore
import Synchronization
import Testing

@testable import CofferServer

#if canImport(Glibc)
    import Glibc
#endif

// MARK: - Helpers

/// Polls `condition` every 50 ms until it holds or `seconds` pass; returns whether it held.
/// (Tests wait on conditions, never on fixed sleeps.)
func eventually(seconds: Double, _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    while true {
        if try await condition() { return true }
        if ContinuousClock.now >= deadline { return false }
        try? await Task.sleep(for: .milliseconds(50))
    }
}

extension RawConnection {
    /// Reads until the response head is complete (taking at most a little of the body); the head.
    func readHead(seconds: Int) async -> String {
        await offThePool { self.readHeadBlocking(seconds: seconds) }
    }

    func readHeadBlocking(seconds: Int) -> String {
        var timeout = timeval(tv_sec: seconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1024)
        while out.count < 65536 {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { break }
            out += buffer[0..<n]
            if let end = String(decoding: out, as: UTF8.self).range(of: "\r\n\r\n") {
                return String(String(decoding: out, as: UTF8.self)[..<end.lowerBound])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Reads and discards until the peer closes (`closed`: EOF or reset) or `seconds` pass
    /// without data or another error (`closed` false).
    func drainToEnd(seconds: Int) -> (bytes: Int, closed: Bool) {
        var timeout = timeval(tv_sec: seconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var total = 0
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { return (total, true) }
            if n < 0 { return (total, errno == ECONNRESET) }
            total += n
        }
    }

    /// Ends the connection without closing the descriptor (the deinit closes it once).
    func hangUp() { shutdown(fd, Int32(SHUT_RDWR)) }

    /// Resets the connection (RST, as a client that crashes or is killed): the socket is closed
    /// with a zero linger by putting /dev/null in its place, so the descriptor stays valid for
    /// the deinit's single close and can never close a descriptor someone else opened.
    func reset() {
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        let null = open("/dev/null", O_RDONLY | O_CLOEXEC)
        if null >= 0 {
            dup2(null, fd)
            close(null)
        }
    }
}

/// Open descriptors of a process, from /proc.
enum ProcessFiles {
    static func descriptors(_ pid: Int32) -> [String] {
        let dir = "/proc/\(pid)/fd"
        return ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).compactMap {
            try? FileManager.default.destinationOfSymbolicLink(atPath: dir + "/" + $0)
        }
    }

    static func count(_ pid: Int32) -> Int { descriptors(pid).count }
    static func sockets(_ pid: Int32) -> Int { descriptors(pid).filter { $0.hasPrefix("socket:") }.count }
}

/// A Prometheus sample's value in `text` (the unlabelled metric `name`, or `name{labels}`).
func metricValue(_ text: String, _ name: String) -> Double? {
    text.split(separator: "\n").first { $0.hasPrefix(name + " ") }.flatMap { Double($0.split(separator: " ").last ?? "") }
}

/// A swift-log handler that keeps every message with its metadata, for assertions on logs.
struct CapturingLogHandler: LogHandler {
    final class Store: Sendable {
        let lines = Mutex<[String]>([])
        func append(_ line: String) { lines.withLock { $0.append(line) } }
        var all: [String] { lines.withLock { $0 } }
    }

    let store: Store
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let merged = metadata.merging(event.metadata ?? [:]) { $1 }
        store.append("\(event.level) \(event.message) " + merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))
    }
}

extension Harness {
    /// A deterministic asset of `size` bytes stored as `assetId`, and a download token for it.
    func largeAsset(_ assetId: String, size: Int) async throws -> String {
        var bytes = [UInt8](repeating: 0, count: size)
        for i in bytes.indices { bytes[i] = UInt8(truncatingIfNeeded: i &* 131 &+ (i >> 16)) }
        try await store(assetId: assetId, bytes: bytes, contentType: "application/octet-stream")
        return services.tokens.mint(
            DownloadClaims(assetId: assetId, sha256: bytes.sha256Hex, redemptionId: "r", expiresAt: Int64(Date().timeIntervalSince1970) + 600))
    }
}

// MARK: - 1. Stalled downloads, per-address download cap

/// `If-Range`: a download resumed with a new token after the asset changed names other bytes —
/// the whole object then, never the new version's tail spliced onto the old head.
@Test func aRangeAppliesOnlyToTheBytesItsIfRangeNames() async throws {
    let h = try await Harness.make()
    defer { h.cleanUp() }
    let token = try await h.largeAsset("resumable", size: 4096)
    let sha = try #require(try await h.services.catalogue.asset("resumable")?.sha256)
    try await h.app.test(.router) { client in
        func get(_ ifRange: String?) async throws -> TestResponse {
            var headers: HTTPFields = [.range: "bytes=100-199"]
            headers[.ifRange] = ifRange
            return try await client.execute(uri: "/v1/downloads/\(token)", method: .get, headers: headers)
        }
        for (ifRange, status, length) in [
            (nil, HTTPResponse.Status.partialContent, 100), ("\"\(sha)\"", .partialContent, 100),
            ("\"\(String(repeating: "0", count: 64))\"", .ok, 4096),
            ("W/\"\(sha)\"", .ok, 4096), ("Sat, 28 Nov 2026 00:00:00 GMT", .ok, 4096),
        ] as [(String?, HTTPResponse.Status, Int)] {
            let r = try await get(ifRange)
            #expect(r.status == status && r.body.readableBytes == length, "If-Range \(ifRange ?? "none")")
        }
    }
    #expect(DownloadController.rangeApplies(ifRange: nil, sha256: sha) && !DownloadController.rangeApplies(ifRange: "", sha256: sha))
}

/// The HTTP hardening of the "Hardening" issue: stalled downloads, key throttling, paths,
/// body budget, notification limits, rate-limiter eviction, proxy addresses, CSV, asset names.
@Suite(.serialized) struct HardeningHTTPTests {
    /// 40 clients ask for a 16 MB asset and never read: the real `coffer serve` process
    /// (its own descriptors, unaffected by tests running in parallel here) closes every one
    /// within the stall timeout, its socket count returns to what it was, the streaming tasks
    /// end (`coffer_downloads_in_flight` 0), each is logged, and a client reading normally at
    /// the same time gets the whole file.
    @Test func fortyStalledDownloadsAreClosedAndTheirDescriptorsFreed() async throws {
        let root = try makeTemporaryDirectory(prefix: "coffer-crash")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("data")
        // An 8 s stall timeout: all 40 must be open and streaming at once, and a debug server
        // short of CPU (the whole suite runs beside it) took over 2 s to fill 40 socket buffers
        // with 16 MB each, closing the first before it accepted the last.
        let server = try await CrashSafetyTests.Server(
            dataDirectory: data, arguments: ["--download-stall-timeout", "8", "--downloads-per-address", "64"])
        defer { server.kill(SIGKILL) }
        let pid = server.process.processIdentifier
        let idleSockets = ProcessFiles.sockets(pid)

        let size = 16 * 1024 * 1024
        var bytes = [UInt8](repeating: 0, count: size)
        for i in bytes.indices { bytes[i] = UInt8(truncatingIfNeeded: i &* 31 &+ (i >> 20)) }
        let sha256 = bytes.sha256Hex
        let client = TestClient(host: "127.0.0.1", port: server.port, configuration: .init(timeout: .seconds(60)))
        client.connect()
        let upload = try await client.execute(
            .init("/v1/admin/assets/big", method: .put, headers: [.authorization: "Bearer \(server.adminKey)"], body: ByteBuffer(bytes: bytes)))
        #expect(upload.status == .created)
        bytes = []
        // A download first, so whatever the server opens lazily (database readers) is open: its
        // first kilobyte, which a test process short of CPU (the whole suite runs beside it)
        // reads at once — 16 MB it might not read for the 8 s the server waits on a stalled client.
        let token = try TokenKeyFile.signer(dataDirectory: data.path, configured: nil).mint(
            DownloadClaims(assetId: "big", sha256: sha256, redemptionId: "r", expiresAt: Int64(Date().timeIntervalSince1970) + 600))
        let warm = try await client.execute(.init("/v1/downloads/\(token)", method: .get, headers: [.range: "bytes=0-1023"]))
        #expect(warm.status == .partialContent)
        try await client.shutdown()
        #expect(await eventually(seconds: 10) { ProcessFiles.sockets(pid) == idleSockets }, "the upload connection closes")
        let baselineFiles = ProcessFiles.count(pid)
        let baselineRSS = LiveTests.residentBytes(pid)

        func metrics() async -> String {
            let c = try? RawConnection(port: server.port)
            await c?.send("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return await c?.receive(seconds: 5) ?? ""
        }

        let stalled = try (0..<40).map { _ in try RawConnection(port: server.port) }
        for connection in stalled { await connection.send("GET /v1/downloads/\(token) HTTP/1.1\r\nHost: x\r\n\r\n") }
        #expect(await eventually(seconds: 10) { ProcessFiles.sockets(pid) == idleSockets + 40 }, "all 40 accepted")
        #expect(await eventually(seconds: 10) { metricValue(await metrics(), "coffer_downloads_in_flight") == 40 }, "all 40 streaming")
        let stalledFiles = ProcessFiles.count(pid)
        let stalledRSS = LiveTests.residentBytes(pid)

        // A well-behaved client at the same time is served in full.
        let reader = try RawConnection(port: server.port)
        await reader.send("GET /v1/downloads/\(token) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        let read = await offThePool { reader.drainToEnd(seconds: 30) }
        #expect(read.closed && read.bytes > size, "the reader got \(read.bytes) bytes")
        reader.hangUp()

        // Within the stall timeout (8 s, re-armed from the last progress) every stalled one is closed.
        let closed = await eventually(seconds: 30) { ProcessFiles.sockets(pid) == idleSockets }
        #expect(closed, "server sockets: \(ProcessFiles.sockets(pid)), idle: \(idleSockets)")
        #expect(await eventually(seconds: 10) { metricValue(await metrics(), "coffer_downloads_in_flight") == 0 }, "the streaming tasks ended")
        #expect(
            await eventually(seconds: 5) { ProcessFiles.count(pid) <= baselineFiles }, "descriptors: \(ProcessFiles.count(pid)) vs \(baselineFiles)")
        let text = await metrics()
        #expect(metricValue(text, "coffer_download_stalls_total") == 40)
        let log = ((try? String(contentsOf: server.log, encoding: .utf8)) ?? "").split(separator: "\n")
        let notices = log.filter { $0.contains("download stalled") }
        #expect(notices.count == 40, "one notice per closed download")
        #expect(notices.allSatisfy { $0.contains("notice") && $0.contains("client=127.0.0.1") }, "\(notices.first ?? "")")

        // The server closed them: each client reads what was in flight, then end of stream.
        let drained = await offThePool { stalled.map { $0.drainToEnd(seconds: 10) } }
        #expect(drained.allSatisfy { $0.closed }, "closed by the server")
        #expect(drained.allSatisfy { $0.bytes < size }, "cut short: \(drained.map(\.bytes).max() ?? 0) bytes at most")
        let afterRSS = LiveTests.residentBytes(pid)
        print(
            "stalled downloads: files \(baselineFiles) → \(stalledFiles) → \(ProcessFiles.count(pid)); RSS MB \(baselineRSS >> 20) → \(stalledRSS >> 20) → \(afterRSS >> 20)"
        )
    }

    @Test func downloadsPerAddressAreCapped() async throws {
        let h = try await Harness.make(configure: { $0.maxDownloadsPerAddress = 2 })
        defer { h.cleanUp() }
        let token = try await h.largeAsset("big", size: 16 * 1024 * 1024)
        try await h.app.test(.live) { client in
            let port = try #require(client.port)
            let first = try RawConnection(port: port)
            let second = try RawConnection(port: port)
            for c in [first, second] {
                await c.send("GET /v1/downloads/\(token) HTTP/1.1\r\nHost: x\r\n\r\n")
                let head = await c.readHead(seconds: 30)
                #expect(head.hasPrefix("HTTP/1.1 200"), "\(head.prefix(80))")
            }
            // Two bodies in progress from 127.0.0.1 (neither client reads): the third waits.
            let third = try await client.execute(uri: "/v1/downloads/\(token)", method: .get)
            #expect(third.status == .tooManyRequests)
            #expect(Harness.code(third) == "tooManyDownloads")
            #expect(third.headers[.retryAfter] == "2")
            #expect(!String(buffer: third.body).contains(token))
            // HEAD streams nothing and is not counted.
            #expect(try await client.execute(uri: "/v1/downloads/\(token)", method: .head).status == .ok)
            // One goes away (reset): its slot is freed and the next download is served.
            // (A one-byte range still takes a slot, and costs nothing on a loaded machine.)
            first.reset()
            let served = try await eventually(seconds: 30) {
                try await client.execute(uri: "/v1/downloads/\(token)", method: .get, headers: [.range: "bytes=0-0"]).status == .partialContent
            }
            #expect(served)
            second.reset()
        }
    }

    /// A client pipelining thousands of requests and reading none of the answers fills every
    /// buffer until the server cannot even write the next response head; the idle timeout
    /// never fires (a request is in progress), the write-stall guard closes the connection.
    @Test func aPipeliningClientThatNeverReadsIsClosed() async throws {
        let h = try await Harness.make(configure: { $0.downloadStallTimeoutSeconds = 1 })
        defer { h.cleanUp() }
        let store = CapturingLogHandler.Store()
        var logger = Logger(label: "capture") { _ in CapturingLogHandler(store: store) }
        logger.logLevel = .notice
        try await h.application(logger: logger).test(.live) { client in
            let port = try #require(client.port)
            let c = try RawConnection(port: port)
            let requests = String(repeating: "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", count: 60_000)
            // Sent from a thread of its own: the send blocks while the server is busy.
            Thread { c.sendBlocking(requests) }.start()
            let closed = await eventually(seconds: 60) { store.all.contains { $0.contains("connection closed: the peer read nothing") } }
            #expect(closed)
            let drained = await offThePool { c.drainToEnd(seconds: 10) }
            #expect(drained.closed, "the server ended the connection after \(drained.bytes) bytes")
            #expect(try await client.execute(uri: "/healthz", method: .get).status == .ok, "others are served")
        }
    }

    // MARK: - 2. Authentication failures throttle failing requests only

    @Test func aValidKeyIsNeverRefusedBecauseOfOthersFailures() async throws {
        // One failure a minute (as many at once): the 20 guesses cannot straddle a refill, however
        // loaded the machine (at 3/min a token came back every 20 s, and a slow run let a guess through).
        let h = try await Harness.make(configure: { $0.authFailuresPerMinute = 1 })
        defer { h.cleanUp() }
        try await h.app.test(.router) { client in
            var statuses: [HTTPResponse.Status] = []
            for guess in 0..<20 {
                let r = try await client.execute(uri: "/v1/admin/products", method: .get, headers: h.bearer("cof_admin_guess\(guess)"))
                statuses.append(r.status)
                // Interleaved with the guesses, the admin's own key keeps working.
                #expect(try await client.execute(uri: "/v1/admin/products", method: .get, headers: h.bearer(h.adminKey)).status == .ok)
                #expect(try await client.execute(uri: "/v1/audit/attempts", method: .get, headers: h.bearer(h.auditorKey)).status == .ok)
            }
            #expect(statuses.prefix(1).allSatisfy { $0 == .unauthorized }, "\(statuses)")
            #expect(statuses.dropFirst(1).allSatisfy { $0 == .tooManyRequests }, "guessing stays at the failure rate: \(statuses)")
            let throttled = try await client.execute(uri: "/v1/audit/attempts", method: .get, headers: h.bearer("cof_auditor_nope"))
            #expect(throttled.status == .tooManyRequests)
            #expect(Harness.code(throttled) == "rateLimited")
            #expect(Int(throttled.headers[.retryAfter] ?? "") ?? 0 >= 1)
            // A wrong role is still 403, not a failure that throttles anyone.
            #expect(try await client.execute(uri: "/v1/admin/products", method: .get, headers: h.bearer(h.auditorKey)).status == .forbidden)
        }
    }

    @Test func theBearerSchemeIsCaseInsensitive() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        try await h.app.test(.router) { client in
            for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
                let r = try await client.execute(uri: "/v1/admin/products", method: .get, headers: [.authorization: "\(scheme) \(h.adminKey)"])
                #expect(r.status == .ok, "\(scheme)")
            }
            #expect(
                try await client.execute(uri: "/v1/admin/products", method: .get, headers: [.authorization: "bearer \t \(h.adminKey) "]).status == .ok
            )
            for header in ["Basic \(h.adminKey)", "Bearer\(h.adminKey)", "Bearer", "Bearer   ", "Bearers \(h.adminKey)", h.adminKey] {
                let r = try await client.execute(uri: "/v1/admin/products", method: .get, headers: [.authorization: header])
                #expect(r.status == .unauthorized, "\(header.prefix(12))")
            }
        }
        #expect(APIKeyMiddleware.bearerCredentials("BeArEr abc") == "abc")
        #expect(APIKeyMiddleware.bearerCredentials("Bearer\tabc") == "abc")
        #expect(APIKeyMiddleware.bearerCredentials("Bearerabc") == nil)
        #expect(APIKeyMiddleware.bearerCredentials("Basic abc") == nil)
    }

    // MARK: - 3. Non-canonical paths, token redaction

    @Test func pathPolicyTables() {
        for path in [
            "/", "/healthz", "/metrics", "/v1/downloads/v1.k1.AAAA.BBBB", "/v1/admin/assets/level-1", "/v1/admin/products/com.coffer.demo.x",
        ] {
            #expect(PathPolicy.isCanonical(path), "\(path)")
        }
        for path in [
            "", "//metrics", "/metrics/", "/metrics//", "/./metrics", "/metrics/.", "/v1/../metrics", "/v1//downloads/t", "/v1/downloads//t",
            "//v1/downloads/t", "/v1/downloads/t/", "/v1/downloads/./t", "/v1/downloads/../downloads/t", "/v1/downloads%2Ft", "/v1/%64ownloads/t",
            "/%6Detrics", "/metrics%2F", "metrics", "*", "/v1/down loads", "/v1/a\\b", "/v1/a#b", "/v1/\u{e9}",
        ] {
            #expect(!PathPolicy.isCanonical(path), "\(path)")
        }
        let token = "v1.k1." + String(repeating: "A", count: 150) + "." + String(repeating: "B", count: 43)
        let variants = [
            "/v1/downloads/\(token)", "//v1/downloads/\(token)", "/v1//downloads/\(token)", "/v1/downloads//\(token)", "/v1/downloads/./\(token)",
            "/v1/DOWNLOADS/\(token)", "/v1/%64ownloads/\(token)", "/v1/downloads%2F\(token)", "/v1/downloads/x/../\(token)",
            "/v1/grants/\(token)", "/other/\(token.replacingOccurrences(of: ".", with: "%2E"))", "/v1/downloads/\(token)/",
        ]
        for path in variants {
            let redacted = PathPolicy.redacted(path)
            #expect(!redacted.contains("AAAAAAAA") && !redacted.contains("BBBBBBBB"), "\(path) → \(redacted)")
            #expect(redacted.contains("<redacted>"))
        }
        #expect(PathPolicy.redacted("/v1/downloads/\(token)") == "/v1/downloads/<redacted>")
        #expect(PathPolicy.redacted("/v1/admin/products/com.coffer.demo.levelpack1") == "/v1/admin/products/com.coffer.demo.levelpack1")
        #expect(Problem.instance("//v1/downloads/\(token)") == nil, "a non-canonical path is never echoed")
        #expect(Problem.instance("/v1/downloads/\(token)") == "/v1/downloads/<redacted>")
        // The request log keeps 256 bytes of a path, and says how long it was.
        let long = "/v1/" + String(repeating: "a/", count: 4000)
        #expect(RequestLogMiddleware.redacted(long) == String(long.prefix(256)) + "…(8004 bytes)")
        #expect(RequestLogMiddleware.redacted("/v1/downloads/\(token)") == "/v1/downloads/<redacted>")
        // Cut before a whole character: "é" is two bytes, the 256th and 257th here.
        let accented = "/" + String(repeating: "a", count: 254) + "é" + "/tail"
        #expect(RequestLogMiddleware.redacted(accented) == "/" + String(repeating: "a", count: 254) + "…(262 bytes)")
    }

    /// Every spelling of a download URL but the canonical one is refused before routing (400
    /// `nonCanonicalPath`), the answer carries no part of the path, and the request log shows
    /// no token; `/metrics` answers only at its exact path.
    @Test func nonCanonicalPathsAreNeverServedNorEchoed() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let token = try await h.largeAsset("small", size: 1000)
        let mac = String(token.split(separator: ".").last ?? "")
        let store = CapturingLogHandler.Store()
        var logger = Logger(label: "capture") { _ in CapturingLogHandler(store: store) }
        logger.logLevel = .info
        let app = h.application(logger: logger)
        let variants = [
            "//v1/downloads/\(token)", "/v1//downloads/\(token)", "/v1/downloads//\(token)", "/v1/downloads/\(token)/", "/v1/./downloads/\(token)",
            "/v1/x/../downloads/\(token)", "/v1/downloads/./\(token)", "/./v1/downloads/\(token)", "/v1/downloads%2F\(token)",
            "/v1/%64ownloads/\(token)", "/v1/downloads/\(token)%2F", "/v1%2Fdownloads/\(token)",
            "/v1/downloads/\(token.replacingOccurrences(of: ".", with: "%2E"))",
        ]
        try await app.test(.live) { client in
            let canonical = try await client.execute(uri: "/v1/downloads/\(token)", method: .get)
            #expect(canonical.status == .ok, "the control: the canonical URL works")
            for path in variants {
                let r = try await client.execute(uri: path, method: .get)
                #expect(r.status == .badRequest, "\(path.prefix(30)) → \(r.status)")
                #expect(Harness.code(r) == "nonCanonicalPath")
                let body = String(buffer: r.body)
                #expect(!body.contains(mac) && !body.contains("downloads"), "\(body)")
                #expect(try Harness.json(r)["instance"] == nil)
            }
            for path in ["/metrics/", "//metrics", "/metrics/.", "/./metrics", "/%6Detrics", "/metrics%2F", "/x/../metrics"] {
                let r = try await client.execute(uri: path, method: .get)
                #expect(r.status == .badRequest, "\(path)")
                #expect(Harness.code(r) == "nonCanonicalPath")
                #expect(!String(buffer: r.body).contains("coffer_"))
            }
            #expect(try await client.execute(uri: "/metrics", method: .get).status == .ok)
            // A canonical 403 names the path with the token redacted.
            let forged = try await client.execute(uri: "/v1/downloads/\(token.dropLast(2))AA", method: .get)
            #expect(forged.status == .forbidden)
            #expect(try Harness.json(forged)["instance"] as? String == "/v1/downloads/<redacted>")
        }
        let lines = store.all.filter { $0.contains(" request ") }
        #expect(lines.count >= variants.count + 10, "\(lines.count) request lines")
        #expect(!store.all.contains { $0.contains(mac) }, "no token in any log line")
        #expect(lines.filter { $0.contains("<redacted>") }.count >= variants.count + 1)
    }

    // MARK: - 4. In-flight request-body budget

    @Test func theBodyBudgetRefusesWith503AndIsReleased() async throws {
        let h = try await Harness.make(configure: {
            $0.bodyBudgetBytes = 1_000_000
            $0.redemptionsPerMinute = 0
            $0.bodyTimeoutSeconds = 20
        })
        defer { h.cleanUp() }
        try await h.app.test(.live) { client in
            let port = try #require(client.port)
            func reserved() async throws -> Double? {
                metricValue(String(buffer: try await client.execute(uri: "/metrics", method: .get).body), "coffer_request_body_bytes_reserved")
            }
            // A declares 700,000 bytes and sends all but the last two: what arrived is reserved.
            let a = try RawConnection(port: port)
            await a.send(
                "POST /v1/redemptions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 700000\r\n\r\n{\"receipt\":\""
                    + String(repeating: "A", count: 700_000 - 12 - 2))
            #expect(try await eventually(seconds: 10) { try await reserved() == 699_998 })
            // B declares 600,000 and sends 400,000: refused once what arrived passes the budget.
            let b = try RawConnection(port: port)
            await b.send(
                "POST /v1/redemptions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 600000\r\n\r\n"
                    + String(repeating: "A", count: 400_000))
            let busy = await b.receive(seconds: 10)
            #expect(busy.hasPrefix("HTTP/1.1 503"), "\(busy.prefix(80))")
            #expect(busy.contains("\"code\":\"busy\""))
            #expect(busy.lowercased().contains("retry-after: 2"))
            b.hangUp()
            #expect(try await eventually(seconds: 10) { try await reserved() == 699_998 }, "B's bytes were released")
            // C is chunked: reserved chunk by chunk until the budget runs out.
            let c = try RawConnection(port: port)
            await c.send("POST /v1/redemptions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
            let chunk = String(repeating: "A", count: 100_000)
            for _ in 0..<4 { await c.send(String(chunk.utf8.count, radix: 16) + "\r\n" + chunk + "\r\n") }
            let chunkedBusy = await c.receive(seconds: 10)
            #expect(chunkedBusy.hasPrefix("HTTP/1.1 503"), "\(chunkedBusy.prefix(80))")
            #expect(chunkedBusy.contains("\"code\":\"busy\""))
            c.hangUp()
            #expect(try await eventually(seconds: 10) { try await reserved() == 699_998 }, "C's chunks were released")
            // A completes (not a receipt: a 4xx), and its reservation goes.
            await a.send("\"}")
            let answer = await a.receive(seconds: 10)
            #expect(answer.hasPrefix("HTTP/1.1 4"), "\(answer.prefix(80))")
            #expect(try await eventually(seconds: 10) { try await reserved() == 0 })
            // The whole budget is available again.
            let big = "{\"receipt\":\"" + String(repeating: "A", count: 900_000) + "\"}"
            let d = try await client.execute(uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: ByteBuffer(string: big))
            #expect(d.status != .serviceUnavailable && (400..<500).contains(d.status.code), "\(d.status)")
            let text = String(buffer: try await client.execute(uri: "/metrics", method: .get).body)
            #expect(metricValue(text, "coffer_busy_total") == 2)
        }
    }

    @Test func theBodyBudgetIsReleasedWhenABodyTimesOut() async throws {
        let h = try await Harness.make(configure: {
            $0.bodyBudgetBytes = 1_000_000
            // Long enough for the checks made while the slow body holds its bytes, however loaded
            // the machine (at 3 s they once raced the timeout); the release is then awaited.
            $0.bodyTimeoutSeconds = 20
            // Well past the body timeout: the slow body must end by its timeout, not as an idle connection.
            $0.idleTimeoutSeconds = 120
        })
        defer { h.cleanUp() }
        try await h.app.test(.live) { client in
            let port = try #require(client.port)
            // A body that declares 900,000 bytes holds only what arrived: one idle connection
            // per 900 KB no longer takes the whole budget (a small body still fits).
            let idle = try RawConnection(port: port)
            await idle.send("POST /v1/redemptions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 900000\r\n\r\n{")
            let small = try await client.execute(
                uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: ByteBuffer(repeating: 0x20, count: 200_000))
            #expect(small.status == .badRequest && Harness.code(small) == "malformedRequest", "\(small.status)")
            shutdown(idle.fd, Int32(SHUT_RDWR))
            // One that sent 700,000 of them holds 700,000: a 400,000-byte body does not fit.
            let slow = try RawConnection(port: port)
            await slow.send(
                "POST /v1/redemptions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 900000\r\n\r\n"
                    + String(repeating: " ", count: 700_000))
            let holding = try await eventually(seconds: 15) {
                metricValue(String(buffer: try await client.execute(uri: "/metrics", method: .get).body), "coffer_request_body_bytes_reserved")
                    == 700_000
            }
            #expect(holding)
            let refused = try await client.execute(
                uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: ByteBuffer(repeating: 0x20, count: 400_000))
            #expect(refused.status == .serviceUnavailable && Harness.code(refused) == "busy")
            // The slow body times out (20 s after its head): 408, and its 700,000 bytes are released.
            let answer = await slow.receive(seconds: 60)
            #expect(answer.hasPrefix("HTTP/1.1 408"), "\(answer.prefix(80))")
            let released = try await eventually(seconds: 30) {
                metricValue(String(buffer: try await client.execute(uri: "/metrics", method: .get).body), "coffer_request_body_bytes_reserved") == 0
            }
            #expect(released)
            let big = "{\"receipt\":\"" + String(repeating: "A", count: 900_000) + "\"}"
            let r = try await client.execute(uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: ByteBuffer(string: big))
            #expect(r.status != .serviceUnavailable, "\(r.status)")
        }
    }

    /// A quarantined object is read again `recheckAfter` after it was found changed, then twice
    /// as long after each re-read that finds it still changed, up to 128 times as long.
    @Test func aQuarantinedObjectIsReadAgainLessOftenWhileItStaysChanged() {
        let start = ContinuousClock.now
        let after = Duration.seconds(30)
        for (failures, wait) in [(0, 30), (1, 60), (3, 240), (7, 3840), (20, 3840)] {
            let entry = ContentQuarantine.Entry(lastCheck: start, failures: failures)
            #expect(!entry.due(after, now: start + .seconds(wait) - .milliseconds(1)), "\(failures)")
            #expect(entry.due(after, now: start + .seconds(wait)), "\(failures)")
        }
    }

    /// An object found changed again soon after its quarantine was lifted (a re-read matched
    /// but its pin was not recorded, or it is swapped back and forth) goes on from the
    /// failures it had, waiting longer each time, not from the first wait.
    @Test func anObjectQuarantinedAgainSoonAfterItWasLiftedKeepsItsCount() async throws {
        let content = InMemoryContentStore()
        let bytes = Array("level bytes".utf8)
        let stored = try await content.write(
            AsyncStream {
                $0.yield(bytes); $0.finish()
            }, maxBytes: 100, expectedSHA256: nil)
        let quarantine = ContentQuarantine(recheckAfter: .zero)
        quarantine.add(stored.sha256)
        #expect(quarantine.failures(stored.sha256) == 0)
        #expect(quarantine.refuses(stored.sha256, content: content, logger: Logger(label: "test")), "refused while it is checked again")
        let deadline = ContinuousClock.now + .seconds(30)
        while quarantine.count > 0, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        #expect(quarantine.count == 0, "the re-read found the right bytes")
        quarantine.add(stored.sha256)
        #expect(quarantine.failures(stored.sha256) == 1)
        let other = String(repeating: "f", count: 64)
        quarantine.add(other)
        #expect(quarantine.failures(other) == 0)
    }

    @Test func byteBudgetAccounting() {
        let budget = ByteBudget(capacity: 100, perClient: 100)
        let one = BodyReservation(budget, client: "a")
        #expect(one.reserve(60) == nil)
        #expect(one.reserve(50) == .spent, "over the capacity")
        #expect(budget.inUse == 60)
        let two = BodyReservation(budget, client: "b")
        #expect(two.reserve(40) == nil)
        #expect(two.reserve(1) == .spent)
        one.release()
        one.release()
        #expect(budget.inUse == 40, "released once")
        do {
            let three = BodyReservation(budget, client: "c")
            #expect(three.reserve(60) == nil)
        }
        #expect(budget.inUse == 40, "a reservation dropped without release() is released by its deinit")
        two.release()
        #expect(budget.inUse == 0 && budget.clients == 0)
    }

    /// One client (its address; an IPv6 client's /64) holds its share of the budget at most,
    /// across all its bodies; the others still have the rest, and what it releases it may take again.
    @Test func oneClientHoldsItsShareOfTheBodyBudgetAtMost() {
        let budget = ByteBudget(capacity: 100)
        #expect(budget.perClient == 25, "a quarter by default")
        let first = BodyReservation(budget, client: "6.6.6.6")
        let second = BodyReservation(budget, client: "6.6.6.6")
        #expect(first.reserve(20) == nil)
        #expect(second.reserve(6) == .clientShare, "26 of a 25 share")
        #expect(second.reserve(5) == nil)
        #expect(budget.inUse == 25)
        let other = BodyReservation(budget, client: "203.0.113.9")
        #expect(other.reserve(25) == nil, "another client is not held back")
        first.release()
        #expect(second.reserve(20) == nil, "released: the share is there again")
        second.release()
        other.release()
        #expect(budget.inUse == 0 && budget.clients == 0, "nothing held, no client kept")
    }

    /// Over HTTP: a client whose slow bodies hold its share gets 429 with Retry-After for
    /// another; another client is served.
    @Test func aClientWithSlowBodiesGets429AndOthersAreServed() async throws {
        let h = try await Harness.make(configure: {
            $0.bodyBudgetBytes = 4 * 1024 * 1024
            $0.jsonBodyLimit = 1024 * 1024
            $0.bodyTimeoutSeconds = 300
            $0.trustedProxies = ["127.0.0.1"]
        })
        defer { h.cleanUp() }
        try await h.app.test(.live) { client in
            let port = try #require(client.port)
            // 1 MiB share: a first body of 600,000 bytes arrives and stays incomplete.
            let slow = try RawConnection(port: port)
            await slow.send(
                "POST /v1/redemptions HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 198.51.100.7\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{\"receipt\":\""
                    + String(repeating: "A", count: 600_000))
            let held = try await eventually(seconds: 30) {
                metricValue(String(buffer: try await client.execute(uri: "/metrics", method: .get).body), "coffer_request_body_bytes_reserved") ?? 0
                    >= 600_000
            }
            #expect(held)
            let body = ByteBuffer(string: "{\"receipt\":\"" + String(repeating: "A", count: 500_000) + "\"}")
            var same = Harness.jsonHeaders
            same[.xForwardedFor] = "198.51.100.7"
            let refused = try await client.execute(uri: "/v1/redemptions", method: .post, headers: same, body: body)
            #expect(refused.status == .tooManyRequests && Harness.code(refused) == "rateLimited" && refused.headers[.retryAfter] != nil)
            let counted = String(buffer: try await client.execute(uri: "/metrics", method: .get).body)
            #expect(counted.contains("coffer_rate_limited_total{route=\"bodies\"} 1"), "counted as every other 429")
            var other = Harness.jsonHeaders
            other[.xForwardedFor] = "203.0.113.9"
            let served = try await client.execute(uri: "/v1/redemptions", method: .post, headers: other, body: body)
            #expect(served.status != .tooManyRequests && served.status != .serviceUnavailable, "\(served.status)")
        }
    }

    // MARK: - 5. Notifications are rate limited

    @Test func notificationFloodsGet429() async throws {
        let h = try await Harness.make(configure: {
            // One token a minute: three requests cannot straddle a refill, however loaded the
            // machine (at 6/min a token came back every 10 s).
            $0.notificationsPerMinute = 1
            $0.notificationBurst = 2
        })
        defer { h.cleanUp() }
        try await h.app.test(.router) { client in
            var statuses: [HTTPResponse.Status] = []
            var last: TestResponse?
            for _ in 0..<3 {
                let r = try await client.execute(
                    uri: "/v1/notifications", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["signedPayload": "x.y.z"]))
                statuses.append(r.status)
                last = r
            }
            #expect(statuses[0] != .tooManyRequests && statuses[1] != .tooManyRequests)
            #expect(statuses[2] == .tooManyRequests)
            let limited = try #require(last)
            #expect(Harness.code(limited) == "rateLimited")
            #expect((1...60).contains(Int(limited.headers[.retryAfter] ?? "") ?? 0), "a token a minute")
            // Its own bucket: redemptions from the same address are not affected.
            let redeemed = try await client.execute(
                uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["receipt": try Harness.receipt("8801")]))
            #expect(redeemed.status == .created)
            let metrics = String(buffer: try await client.execute(uri: "/metrics", method: .get).body)
            #expect(metrics.contains("coffer_rate_limited_total{route=\"notifications\"} 1"))
        }
    }

    /// An IPv6 client has a /64 to pick addresses from: counted one by one, the limits would
    /// not limit (a new address per burst). Each of three addresses of one /64 draws from one
    /// bucket; another /64 has its own. (Through a trusted proxy, as nginx passes the client.)
    @Test func ipv6ClientsAreLimitedByTheirSlash64() async throws {
        #expect(IPAddress.limitKey("2001:db8::1") == "2001:db8::/64")
        #expect(IPAddress.limitKey("2001:db8::ffff:1") == IPAddress.limitKey("2001:db8::2"))
        #expect(IPAddress.limitKey("2001:db8:0:1::1") == "2001:db8:0:1::/64")
        #expect(IPAddress.limitKey("203.0.113.9") == "203.0.113.9", "IPv4: the address itself")
        #expect(IPAddress.limitKey("unknown") == "unknown")
        // Where a /64 is not one client's: IPv4 carried in IPv6 counts as that IPv4 address.
        #expect(IPAddress.limitKey("64:ff9b::102:304") == "1.2.3.4", "NAT64: the IPv4 internet is not one client")
        #expect(IPAddress.limitKey("2002:102:304:5::1") == "1.2.3.4", "6to4: one IPv4 host, not 65,536 buckets")
        #expect(IPAddress.limitKey("2001:0:4136:e378:8000:63bf:fefd:fcfb") == "1.2.3.4", "Teredo: the client's (inverted) address")
        #expect(IPAddress.limitKey("fe80::1") == "fe80::1" && IPAddress.limitKey("fe80::2") == "fe80::2", "link-local: each its own")
        #expect(IPAddress.limitKey("::1") == "::1")
        let h = try await Harness.make(configure: {
            // One token a minute: the four requests cannot straddle a refill on a loaded machine.
            $0.notificationsPerMinute = 1
            $0.notificationBurst = 2
            $0.trustedProxies = ["127.0.0.1"]
        })
        defer { h.cleanUp() }
        try await h.app.test(.live) { client in
            func notify(from address: String) async throws -> HTTPResponse.Status {
                var headers = Harness.jsonHeaders
                headers[.xForwardedFor] = address
                return try await client.execute(
                    uri: "/v1/notifications", method: .post, headers: headers, body: try Harness.body(["signedPayload": "x.y.z"])
                ).status
            }
            var statuses: [HTTPResponse.Status] = []
            for address in ["2001:db8:0:1::a", "2001:db8:0:1::b", "2001:db8:0:1:ffff::c", "2001:db8:0:2::a"] {
                statuses.append(try await notify(from: address))
            }
            #expect(statuses[0] != .tooManyRequests && statuses[1] != .tooManyRequests, "\(statuses)")
            #expect(statuses[2] == .tooManyRequests, "the same /64")
            #expect(statuses[3] != .tooManyRequests, "another /64")
        }
    }

    /// Behind a proxy on the same host that is not trusted, every client is the proxy: the
    /// operator is told once (not per request), and not when the proxy is trusted.
    @Test func anUntrustedLocalProxyIsReportedOnce() async throws {
        for trusted in [false, true] {
            let h = try await Harness.make(configure: { $0.trustedProxies = trusted ? ["127.0.0.1"] : [] })
            defer { h.cleanUp() }
            let store = CapturingLogHandler.Store()
            var logger = Logger(label: "capture") { _ in CapturingLogHandler(store: store) }
            logger.logLevel = .warning
            try await h.application(logger: logger).test(.live) { client in
                for address in ["203.0.113.1", "203.0.113.2", "203.0.113.3"] {
                    let forwarded = try await client.execute(uri: "/healthz", method: .get, headers: [.xForwardedFor: address])
                    #expect(forwarded.status == .ok)
                }
                let direct = try await client.execute(uri: "/healthz", method: .get)
                #expect(direct.status == .ok)
            }
            let warnings = store.all.filter { $0.contains("is not a trusted proxy") }
            #expect(warnings.count == (trusted ? 0 : 1), "\(store.all)")
            #expect(warnings.allSatisfy { $0.contains("peer=127.0.0.1") && $0.contains("COFFER_TRUSTED_PROXIES") })
        }
    }

    // MARK: - 6. Rate-limiter eviction

    /// A table of 100 filled by 5,000 new addresses: never more than 100 tracked, at most one
    /// sweep per 10 new addresses (each sweep frees a tenth: amortised O(1)), and a client that
    /// keeps coming keeps its (empty) bucket — it is still refused.
    @Test func rateLimiterEvictionIsBoundedAmortisedAndKeepsActiveClients() {
        let limiter = RateLimiter(perMinute: 1, burst: 2, maxClients: 100)
        var now = 1000.0
        #expect(limiter.take("hot", now: now) == nil)
        #expect(limiter.take("hot", now: now) == nil)
        #expect(limiter.take("hot", now: now) != nil, "hot has spent its burst")
        var maxTracked = 0
        for i in 0..<5000 {
            now += 0.001
            _ = limiter.take("10.0.\(i / 250).\(i % 250)", now: now)
            #expect(limiter.take("hot", now: now) != nil, "hot's empty bucket survives (at \(i))")
            maxTracked = max(maxTracked, limiter.trackedClients)
        }
        #expect(maxTracked <= 100)
        #expect(limiter.sweeps <= 5000 / 10 + 1, "\(limiter.sweeps) sweeps")
        #expect(limiter.sweeps > 0)
        // Idle (refilled) buckets are what goes first: after two minutes all have refilled.
        now += 120
        _ = limiter.take("new", now: now)
        #expect(limiter.trackedClients <= 100)
        #expect(limiter.take("hot", now: now) == nil, "refilled after two minutes")
    }

    @Test func quickselectFindsTheRankedValue() {
        var rng = SplitMix64(state: 42)
        for n in [1, 2, 3, 10, 101, 1000] {
            let values = (0..<n).map { _ in Double(Int.random(in: 0..<50, using: &rng)) }
            for rank in Set([0, n / 2, n - 1]) {
                var copy = values
                #expect(RateLimiter.select(&copy, rank: rank) == values.sorted()[rank])
            }
        }
    }

    // MARK: - 7. Proxy addresses in one normal form

    @Test func ipv4MappedAndIPv6SpellingsMatchTrustedProxies() {
        #expect(IPAddress.parse("::ffff:10.0.0.1") == "10.0.0.1")
        #expect(IPAddress.parse("::FFFF:10.0.0.1") == "10.0.0.1")
        #expect(IPAddress.parse("::ffff:a00:1") == "10.0.0.1")
        #expect(IPAddress.parse("2001:DB8:0:0:0:0:0:1") == "2001:db8::1")
        #expect(IPAddress.parse("10.0.0.1") == "10.0.0.1")
        for garbage in ["<script>", "1.2.3.4:80", "10.0.0.256", "", "::g", "1.2.3", " 1.2.3.4"] {
            #expect(IPAddress.parse(garbage) == nil, "\(garbage)")
        }

        let client = ClientAddressMiddleware.client
        #expect(client("::ffff:10.0.0.1", ["203.0.113.9"], ["10.0.0.1"]) == "203.0.113.9", "mapped peer, plain trusted")
        #expect(client("10.0.0.1", ["203.0.113.9"], ["::ffff:10.0.0.1"]) == "203.0.113.9", "plain peer, mapped trusted")
        #expect(client("2001:db8::1", ["203.0.113.9"], ["2001:DB8:0::1"]) == "203.0.113.9", "IPv6 spelled otherwise")
        #expect(client("10.0.0.1", ["203.0.113.9, ::ffff:10.0.0.2"], ["10.0.0.1", "10.0.0.2"]) == "203.0.113.9", "a mapped trusted hop")
        #expect(client("10.0.0.1", ["::FFFF:203.0.113.9"], ["10.0.0.1"]) == "203.0.113.9", "the client in normal form")
        #expect(client("::ffff:198.51.100.7", ["1.2.3.4"], ["10.0.0.1"]) == "198.51.100.7", "an untrusted peer, normalised")
        #expect(client("10.0.0.1", ["2001:DB8::0:1"], ["10.0.0.1"]) == "2001:db8::1")
        #expect(client("10.0.0.1", ["<script>"], ["10.0.0.1"]) == "10.0.0.1")
    }

    // MARK: - 8. CSV cells

    @Test func csvCellsWithLeadingWhitespaceCannotBecomeFormulas() {
        for cell in [" =1+1", "  +1", " -2", " @SUM(A1)", "\t=1", "\r=1", "\n=1", "\u{3000}=1", "\u{A0}=1", " \t @x", "\u{FF1D}1+1", "\u{0}=1"] {
            #expect(CSV.field(cell).hasPrefix("\"'"), "\(cell.unicodeScalars.map { String($0.value, radix: 16) })")
        }
        for cell in ["\tplain", "\rplain"] { #expect(CSV.field(cell).hasPrefix("\"'"), "a leading tab or CR is neutralised whatever follows") }
        for cell in ["plain", " plain", "a=b", "1-2", "user@example.com", "", "   "] {
            #expect(!CSV.field(cell).hasPrefix("\"'"), "\(cell)")
        }
        #expect(CSV.field(" =\"x\"") == "\"' =\"\"x\"\"\"")
    }

    // MARK: - 9. Asset names

    @Test func assetNamesWithControlsOrBadUTF8AreRefused() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        try await h.app.test(.router) { client in
            for query in [
                "a%00b", "a%07", "x%7F", "x%C2%85", "%FF", "a%C3", "a%zz", "a%2", "a%0Ab", "a%0D%0Ab", "a%2Fb", "a%5Cb", "",
                // A right-to-left override ("level‮nib.exe" shows as "levelexe.bin"), a zero-width space, a line separator.
                "level%E2%80%AEnib.exe", "a%E2%80%8Bb", "a%E2%80%A8b",
                String(repeating: "a", count: 201), String(repeating: "%C3%A9", count: 101),
            ] {
                let r = try await client.execute(
                    uri: "/v1/admin/assets/bad?name=\(query)", method: .put, headers: h.bearer(h.adminKey), body: ByteBuffer(string: "x"))
                #expect(r.status == .badRequest, "\(query.prefix(20))")
                #expect(Harness.code(r) == "invalidAssetName", "\(query.prefix(20))")
            }
            let twice = try await client.execute(
                uri: "/v1/admin/assets/bad?name=a&name=b", method: .put, headers: h.bearer(h.adminKey), body: ByteBuffer(string: "x"))
            #expect(Harness.code(twice) == "invalidAssetName")
            #expect(try await client.execute(uri: "/v1/admin/assets/bad", method: .get, headers: h.bearer(h.adminKey)).status == .notFound)
            for (query, name) in [
                ("Level%20One", "Level One"), (String(repeating: "%C3%A9", count: 100), String(repeating: "\u{e9}", count: 100)), ("a+b", "a+b"),
            ] {
                let r = try await client.execute(
                    uri: "/v1/admin/assets/good?name=\(query)", method: .put, headers: h.bearer(h.adminKey), body: ByteBuffer(string: "x"))
                #expect(r.status == .created)
                #expect(try Harness.json(r)["name"] as? String == name)
            }
            let unnamed = try await client.execute(
                uri: "/v1/admin/assets/plain", method: .put, headers: h.bearer(h.adminKey), body: ByteBuffer(string: "x"))
            #expect(try Harness.json(unnamed)["name"] as? String == "plain", "no name: the asset id")
            // Emoji keep their joiners.
            let family = try await client.execute(
                uri: "/v1/admin/assets/emoji?name=%F0%9F%91%A9%E2%80%8D%F0%9F%91%A7.png", method: .put, headers: h.bearer(h.adminKey),
                body: ByteBuffer(string: "x"))
            #expect(family.status == .created)
        }
    }

    /// An upload's `Content-Type` is every download's: a media type in ASCII, whole — not any
    /// header value cut at 128 characters (a C1 control reached `coffer admin assets list`).
    @Test func uploadTypesAreMediaTypes() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        try await h.app.test(.router) { client in
            func upload(_ type: String) async throws -> TestResponse {
                var headers = h.bearer(h.adminKey)
                headers[.contentType] = type
                return try await client.execute(uri: "/v1/admin/assets/typed", method: .put, headers: headers, body: ByteBuffer(string: "x"))
            }
            for bad in [
                "text", "text/", "/plain", "text/plain; charset", "text/plain; charset=", "text/pl ain", "text/plain; a=\"open",
                "text/plain\u{85}", "text/plain; a=\"\u{9B}2J\"", "image/png; x=" + String(repeating: "a", count: 120), "téxt/plain",
            ] {
                let r = try await upload(bad)
                #expect(r.status == .badRequest && Harness.code(r) == "malformedRequest", "\(bad.unicodeScalars.map { String($0.value, radix: 16) })")
            }
            #expect(try await client.execute(uri: "/v1/admin/assets/typed", method: .get, headers: h.bearer(h.adminKey)).status == .notFound)
            for good in [
                "image/png", "text/plain; charset=utf-8", "text/plain;", "application/vnd.api+json; charset=\"utf-8\"; ; x=y;",
                "application/vnd.example+json;v=2 ; q=\"a \\\" b\"", "Audio/OGG",
            ] {
                let r = try await upload(good)
                #expect(r.status == .created, "\(good)")
                #expect(try Harness.json(r)["contentType"] as? String == good)
            }
        }
        for (value, valid) in [("a/b", true), ("a/b;c=d", true), ("a/b\t;\tc=\"\\\t\"", true), ("a/b;c=\"\\", false), ("a/b c", false)] {
            #expect(UploadText.isMediaType(value) == valid, "\(value)")
        }
    }
}
