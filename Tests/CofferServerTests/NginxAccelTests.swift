import CofferCore
import CofferS3
import CofferTestSupport
import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The X-Accel-Redirect deployment, for real: `coffer serve --accel-redirect /_coffer/`
/// behind nginx running deploy/coffer_accel_location (its alias pointed at this test's data
/// directory). Coffer checks tokens; nginx sends the bytes. Skipped where nginx is absent
/// (.ci/run installs it).
@Suite(.serialized) struct NginxAccelTests {
    static let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"].first { FileManager.default.isExecutableFile(atPath: $0) }

    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// Whether something accepts connections on 127.0.0.1:`port` (a probe that, unlike
    /// `RawConnection`, records no test issue when nothing listens yet).
    static func accepts(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }

    /// The ACL commands the snippet gives nginx's user: read access to content/ only, and no
    /// more than passage (x) through the data directory — a recursive grant there would let
    /// nginx's user read keys/ (the token key mints downloads) and the database.
    @Test func theAccelACLsReachContentOnly() throws {
        let commands = try Self.deployFile("coffer_accel_location").split(separator: "\n")
            .map { $0.drop { $0 == "#" || $0 == " " } }.filter { $0.hasPrefix("setfacl ") && !$0.contains(" -x ") }
        #expect(commands.count == 3, "\(commands)")
        for command in commands {
            let words = command.split(separator: " ")
            let paths = words.filter { $0.hasPrefix("/") }
            let grant = words.last { $0.hasPrefix("u:www-data:") }
            if words.contains("-R") {
                #expect(paths.allSatisfy { $0 == "/var/lib/coffer/content" || $0.hasPrefix("/var/lib/coffer/content/") }, "\(command)")
            } else {
                #expect(paths == ["/var/lib/coffer"] && grant == "u:www-data:x", "\(command)")
            }
        }
    }

    @Test(.enabled(if: nginx != nil)) func nginxSendsTheBytesCofferAuthorises() async throws {
        let root = try makeTemporaryDirectory(prefix: "coffer-crash")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("data")
        let server = try await CrashSafetyTests.Server(dataDirectory: data, arguments: ["--accel-redirect", "/_coffer/"])
        defer { server.kill(SIGTERM) }

        // nginx: the deploy snippet, aliased to this data directory, in front of this Coffer.
        // Its workers run as root here because the content store is 0700 (deploy/README.md
        // shows the ACL that gives nginx's user read access instead).
        let snippet = try Self.deployFile("coffer_accel_location")
            .replacingOccurrences(of: "/var/lib/coffer/content/", with: data.appendingPathComponent("content").path + "/")
        let (nginx, client) = try await Self.startNginx(root: root, snippet: snippet, cofferPort: server.port)
        defer {
            nginx.terminate()
            Task { try? await client.shutdown() }
        }

        // Redeem through nginx, then download: the body comes from nginx's sendfile.
        let asset = try await Self.redeemFirstAsset(client, data: data, transaction: 880_000)
        let url = try #require(asset["url"] as? String)
        let sha = try #require(asset["sha256"] as? String)
        let size = try #require(asset["size"] as? Int)

        let whole = try await client.execute(.init(url, method: .get, authority: "localhost"))
        #expect(whole.status == .ok)
        let bytes = Array(whole.body?.readableBytesView ?? ByteBuffer().readableBytesView)
        #expect(bytes.count == size)
        #expect(SHA256Hex.of(bytes) == sha)
        #expect(whole.headers[.contentType] == (asset["contentType"] as? String))
        #expect(!whole.headers.contains { $0.name.canonicalName == "x-accel-redirect" }, "the internal path never reaches the client")
        Self.expectCoffersDownloadHeaders(whole, sha256: sha)

        let ranged = try await client.execute(.init(url, method: .get, authority: "localhost", headers: [.range: "bytes=0-9"]))
        #expect(ranged.status == .partialContent)
        #expect(Array(ranged.body?.readableBytesView ?? ByteBuffer().readableBytesView) == Array(bytes.prefix(10)))
        // If-Range against Coffer's ETag (the SHA-256): these bytes resume, others start over.
        let resumed = try await client.execute(
            .init(url, method: .get, authority: "localhost", headers: [.range: "bytes=5-", .ifRange: "\"\(sha)\""]))
        #expect(resumed.status == .partialContent)
        #expect(Array(resumed.body?.readableBytesView ?? ByteBuffer().readableBytesView) == Array(bytes[5...]))
        let changed = try await client.execute(
            .init(url, method: .get, authority: "localhost", headers: [.range: "bytes=5-", .ifRange: "\"\(String(repeating: "0", count: 64))\""]))
        #expect(changed.status == .ok && Array(changed.body?.readableBytesView ?? ByteBuffer().readableBytesView) == bytes)

        // Coffer still decides: a bad token is its 403, and the internal location is unreachable.
        let forged = try await client.execute(.init("/v1/downloads/v1.k1.AAAA.AAAA", method: .get, authority: "localhost"))
        #expect(forged.status == .forbidden)
        let direct = try await client.execute(.init("/_coffer/objects/\(sha.prefix(2))/\(sha.dropFirst(2))", method: .get, authority: "localhost"))
        #expect(direct.status == .notFound)
    }
}

extension NginxAccelTests {
    /// What Coffer promises of every download reaches the client through nginx too: nginx
    /// passes on only a few of the redirecting response's headers (Content-Type,
    /// Content-Disposition, Cache-Control…), so the locations add the others.
    static func expectCoffersDownloadHeaders(_ response: TestClient.Response, sha256: String, sourceLocation: SourceLocation = #_sourceLocation) {
        func header(_ name: String) -> String? { HTTPField.Name(name).flatMap { response.headers[$0] } }
        #expect(header("X-Content-Type-Options") == "nosniff", sourceLocation: sourceLocation)
        #expect(header("Content-Security-Policy")?.contains("sandbox") == true, sourceLocation: sourceLocation)
        #expect(header("Content-Disposition")?.hasPrefix("attachment") == true, sourceLocation: sourceLocation)
        #expect(header("ETag") == "\"\(sha256)\"", "Coffer's ETag, the SHA-256", sourceLocation: sourceLocation)
        #expect(header("Cache-Control")?.contains("private") == true, sourceLocation: sourceLocation)
        #expect(header("Strict-Transport-Security") == "max-age=31536000", "the server's HSTS, repeated", sourceLocation: sourceLocation)
    }

    /// Redeems a fresh demo receipt (minted with `data`'s sandbox CA) through `client`; returns
    /// the grant's first asset.
    static func redeemFirstAsset(_ client: TestClient, data: URL, transaction: Int) async throws -> [String: Any] {
        let receipt = try await CofferExecutable.run([
            "sandbox", "receipt", "--dir", data.appendingPathComponent("sandbox").path, "--bundle-id", "com.coffer.demo",
            "--purchase", "com.coffer.demo.levelpack1:\(transaction)", "--base64",
        ])
        let redeemed = try await client.execute(
            .init(
                "/v1/redemptions", method: .post, authority: "localhost", headers: [.contentType: "application/json"],
                body: ByteBuffer(string: "{\"receipt\":\"\(receipt.stdout.trimmingCharacters(in: .whitespacesAndNewlines))\"}")))
        try #require(redeemed.status == .created)
        let object = try #require(
            try JSONSerialization.jsonObject(with: Data(redeemed.body?.readableBytesView ?? ByteBuffer().readableBytesView)) as? [String: Any])
        return try #require((object["assets"] as? [[String: Any]])?.first)
    }

    static func deployFile(_ name: String) throws -> String {
        let repo = CrashSafetyTests.Server.contentDirectory.deletingLastPathComponent()
        return try String(contentsOf: repo.appendingPathComponent("deploy/\(name)"), encoding: .utf8)
    }

    /// nginx on a free port in front of the Coffer on `cofferPort`, with `snippet` (a deploy
    /// location) included; returns it and a connected client once it accepts connections.
    static func startNginx(root: URL, snippet: String, cofferPort: Int) async throws -> (Process, TestClient) {
        let prefix = root.appendingPathComponent("nginx")
        try FileManager.default.createDirectory(at: prefix.appendingPathComponent("logs"), withIntermediateDirectories: true)
        try snippet.write(to: prefix.appendingPathComponent("coffer_accel_location"), atomically: true, encoding: .utf8)
        let port = try Self.freePort()
        let conf = """
            worker_processes 1;
            user root;
            pid \(prefix.path)/nginx.pid;
            error_log \(prefix.path)/logs/error.log;
            events { worker_connections 64; }
            http {
                access_log off;
                client_body_temp_path \(prefix.path)/body;
                proxy_temp_path \(prefix.path)/proxy;
                upstream coffer { server 127.0.0.1:\(cofferPort); }
                server {
                    listen 127.0.0.1:\(port);
                    location / { proxy_pass http://coffer; proxy_set_header X-Forwarded-For $remote_addr; }
                    include \(prefix.path)/coffer_accel_location;
                }
            }
            """
        try conf.write(to: prefix.appendingPathComponent("nginx.conf"), atomically: true, encoding: .utf8)
        let nginx = Process()
        nginx.executableURL = URL(fileURLWithPath: try #require(Self.nginx))
        nginx.arguments = ["-p", prefix.path, "-c", prefix.appendingPathComponent("nginx.conf").path, "-g", "daemon off;"]
        nginx.standardError = FileHandle.nullDevice
        try nginx.run()
        var ready = false
        for _ in 0..<50 where !ready {
            try await Task.sleep(for: .milliseconds(100))
            ready = Self.accepts(port: port)
        }
        guard ready else {
            nginx.terminate()
            throw MotoServer.Failure("nginx did not start")
        }
        let client = TestClient(host: "127.0.0.1", port: port, configuration: .init(timeout: .seconds(60)))
        client.connect()
        return (nginx, client)
    }

    /// The bucket deployment: deploy/coffer_accel_s3_location (proxy_pass pointed at the test's
    /// store) — nginx fetches the presigned URL Coffer hands it and streams the exact bytes,
    /// Range included; the internal location stays unreachable. moto without authentication:
    /// moto 5 cannot check presigned URLs (see `MotoServer.shared(authenticating:)`).
    @Test(.enabled(if: nginx != nil)) func nginxSendsTheBytesFromTheBucket() async throws {
        let moto = try await MotoServer.shared(authenticating: false)
        let bucket = try await moto.createBucket()
        let root = try makeTemporaryDirectory(prefix: "coffer-accel-s3")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("data")
        let server = try await CrashSafetyTests.Server(
            dataDirectory: data,
            arguments: ["--accel-redirect", "/_coffer/", "--content-store", "s3://\(bucket)/game", "--s3-endpoint", moto.endpoint],
            environment: moto.environment)
        defer { server.kill(SIGTERM) }
        let snippet = try Self.deployFile("coffer_accel_s3_location").replacingOccurrences(of: "http://127.0.0.1:9000/", with: moto.endpoint + "/")
        let (nginx, client) = try await Self.startNginx(root: root, snippet: snippet, cofferPort: server.port)
        defer {
            nginx.terminate()
            Task { try? await client.shutdown() }
        }
        let asset = try await Self.redeemFirstAsset(client, data: data, transaction: 880_001)
        let url = try #require(asset["url"] as? String)
        let whole = try await client.execute(.init(url, method: .get, authority: "localhost"))
        #expect(whole.status == .ok)
        let bytes = Array(whole.body?.readableBytesView ?? ByteBuffer().readableBytesView)
        #expect(bytes.count == asset["size"] as? Int && SHA256Hex.of(bytes) == asset["sha256"] as? String)
        let leaked = whole.headers.filter { $0.name.canonicalName == "x-accel-redirect" || $0.name.canonicalName.hasPrefix("x-amz") }
        #expect(leaked.isEmpty, "\(leaked)")
        Self.expectCoffersDownloadHeaders(whole, sha256: asset["sha256"] as? String ?? "")
        let head = try await client.execute(.init(url, method: .head, authority: "localhost"))
        #expect(head.status == .ok && head.headers[.contentLength] == String(bytes.count))
        // Coffer's ETag is the SHA-256 (the store's would be an MD5): the presigned GET was not proxied for a HEAD.
        #expect(head.headers[.eTag] == "\"\(asset["sha256"] as? String ?? "")\"", "HEAD is answered by Coffer")
        let ranged = try await client.execute(.init(url, method: .get, authority: "localhost", headers: [.range: "bytes=3-12"]))
        #expect(ranged.status == .partialContent)
        #expect(Array(ranged.body?.readableBytesView ?? ByteBuffer().readableBytesView) == Array(bytes[3...12]))
        #expect(!ranged.headers.contains { $0.name.canonicalName == "x-coffer-range" }, "Coffer's range for nginx stays inside")
        #expect(!whole.headers.contains { $0.name.canonicalName == "x-coffer-if-match" }, "so does the pin")
        // A resumed download: If-Range is Coffer's to decide (the store would compare it with
        // its MD5 and restart from zero, or ignore it and splice other bytes onto the head).
        let sha = asset["sha256"] as? String ?? ""
        let resumed = try await client.execute(
            .init(url, method: .get, authority: "localhost", headers: [.range: "bytes=5-", .ifRange: "\"\(sha)\""]))
        #expect(resumed.status == .partialContent && resumed.headers[.contentRange] == "bytes 5-\(bytes.count - 1)/\(bytes.count)")
        #expect(Array(resumed.body?.readableBytesView ?? ByteBuffer().readableBytesView) == Array(bytes[5...]))
        let changed = try await client.execute(
            .init(url, method: .get, authority: "localhost", headers: [.range: "bytes=5-", .ifRange: "\"\(String(repeating: "0", count: 64))\""]))
        #expect(changed.status == .ok, "another version's tail is never spliced on")
        #expect(Array(changed.body?.readableBytesView ?? ByteBuffer().readableBytesView) == bytes)
        // A range outside the object is Coffer's 416, with the size a client resumes from.
        let outside = try await client.execute(.init(url, method: .get, authority: "localhost", headers: [.range: "bytes=999999999-"]))
        let said = String(buffer: outside.body ?? ByteBuffer())
        #expect(outside.status == .rangeNotSatisfiable, "\(said)")
        #expect(outside.headers[.contentRange] == "bytes */\(bytes.count)")
        #expect(said.contains("\"rangeNotSatisfiable\"") && !said.contains(bucket) && !said.contains("<Error"), "\(said)")
        // The store's failures are Coffer's problems: here a store nginx cannot reach.
        let deadPort = try Self.freePort()
        let (deadNginx, deadClient) = try await Self.startNginx(
            root: root.appendingPathComponent("dead"),
            snippet: snippet.replacingOccurrences(of: moto.endpoint + "/", with: "http://127.0.0.1:\(deadPort)/"), cofferPort: server.port)
        defer {
            deadNginx.terminate()
            Task { try? await deadClient.shutdown() }
        }
        let failed = try await deadClient.execute(.init(url, method: .get, authority: "localhost"))
        let problem = String(buffer: failed.body ?? ByteBuffer())
        #expect(failed.status == .badGateway && problem.contains("\"contentStoreError\""), "\(problem)")
        #expect(failed.headers[.contentType] == "application/problem+json")
        #expect(failed.headers[.contentDisposition] == nil, "a problem is never saved as the asset's file")
        #expect(failed.headers[.xContentTypeOptions] == "nosniff" && failed.headers[.contentSecurityPolicy]?.contains("sandbox") == true)
        #expect(failed.headers[HTTPField.Name("Strict-Transport-Security")!] == "max-age=31536000")
        let direct = try await client.execute(
            .init("/_coffer/s3/\(bucket)/game/objects/\(asset["sha256"] as? String ?? "")", method: .get, authority: "localhost"))
        #expect(direct.status == .notFound)
        // nginx hashes nothing: it asks for the version Coffer pinned at upload (If-Match), so
        // other bytes put at the address are a 502, whole or in part, never sent.
        let store = try S3Client(
            location: try S3Location("s3://\(bucket)/game"), endpoint: moto.endpoint, region: "us-east-1",
            credentials: S3Credentials(accessKeyId: moto.accessKeyId, secretAccessKey: moto.secretAccessKey))
        defer { Task { try? await store.shutdown() } }
        let forged = bytes.map { $0 ^ 0x20 }
        try await store.put("game/objects/\(sha)", body: ByteBuffer(bytes: forged), sha256: SHA256.hash(data: forged))
        for headers: HTTPFields in [[:], [.range: "bytes=3-12"]] {
            let refused = try await client.execute(.init(url, method: .get, authority: "localhost", headers: headers))
            let body = String(buffer: refused.body ?? ByteBuffer())
            #expect(refused.status == .badGateway && body.contains("\"contentStoreError\""), "\(headers): \(body)")
        }
    }

    /// deploy/nginx.conf itself (TLS swapped for a plain loopback listener, paths pointed at
    /// this test's files) in front of a real Coffer: /metrics answers only at its exact path
    /// and only to the allow-list (this client, 127.0.0.1, is outside 10.0.0.0/8), whatever
    /// the spelling; a download URL in another spelling is never served; and the access log
    /// never holds a token.
    @Test(.enabled(if: nginx != nil)) func deployConfigKeepsMetricsPrivateAndTokensOutOfTheLog() async throws {
        let root = try makeTemporaryDirectory(prefix: "coffer-crash")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("data")
        let server = try await CrashSafetyTests.Server(dataDirectory: data)
        defer { server.kill(SIGTERM) }
        let repo = CrashSafetyTests.Server.contentDirectory.deletingLastPathComponent()
        let prefix = root.appendingPathComponent("nginx")
        try FileManager.default.createDirectory(at: prefix.appendingPathComponent("logs"), withIntermediateDirectories: true)
        let port = try Self.freePort()
        let accessLog = prefix.appendingPathComponent("logs/coffer.log")
        var deploy = try String(contentsOf: repo.appendingPathComponent("deploy/nginx.conf"), encoding: .utf8)
        for (from, to) in [
            ("listen 443 ssl http2;", "listen 127.0.0.1:\(port);"), ("server 127.0.0.1:8080;", "server 127.0.0.1:\(server.port);"),
            ("/etc/nginx/coffer_proxy_params", repo.appendingPathComponent("deploy/coffer_proxy_params").path),
            ("/etc/nginx/coffer_accel_location", repo.appendingPathComponent("deploy/coffer_accel_location").path),
            ("/var/log/nginx/coffer.log", accessLog.path),
            // The redemption rate, down to what a test can reach without timing: 3 at once, then 429.
            ("rate=20r/s", "rate=1r/m"), ("burst=200 nodelay", "burst=2 nodelay"),
        ] {
            try #require(deploy.contains(from), "deploy/nginx.conf no longer has \(from)")
            deploy = deploy.replacingOccurrences(of: from, with: to)
        }
        deploy = deploy.split(separator: "\n", omittingEmptySubsequences: false).filter { !$0.contains("ssl_certificate") }.joined(separator: "\n")
        let conf = """
            worker_processes 1;
            user root;
            pid \(prefix.path)/nginx.pid;
            error_log \(prefix.path)/logs/error.log;
            events { worker_connections 64; }
            http {
                client_body_temp_path \(prefix.path)/body;
                proxy_temp_path \(prefix.path)/proxy;
            \(deploy)
            }
            """
        try conf.write(to: prefix.appendingPathComponent("nginx.conf"), atomically: true, encoding: .utf8)
        let nginx = Process()
        nginx.executableURL = URL(fileURLWithPath: try #require(Self.nginx))
        nginx.arguments = ["-p", prefix.path, "-c", prefix.appendingPathComponent("nginx.conf").path, "-g", "daemon off;"]
        let stderrLog = prefix.appendingPathComponent("logs/stderr.log")
        _ = FileManager.default.createFile(atPath: stderrLog.path, contents: nil)
        nginx.standardError = try FileHandle(forWritingTo: stderrLog)
        try nginx.run()
        defer { nginx.terminate() }
        var ready = false
        for _ in 0..<50 where !ready {
            try await Task.sleep(for: .milliseconds(100))
            ready = Self.accepts(port: port)
        }
        try #require(ready, "nginx did not start: \((try? String(contentsOf: stderrLog, encoding: .utf8)) ?? "")")
        let client = TestClient(host: "127.0.0.1", port: port, configuration: .init(timeout: .seconds(60)))
        client.connect()
        defer { Task { try? await client.shutdown() } }

        for path in [
            "/metrics", "//metrics", "/./metrics", "/%6Detrics", "/metrics?x=1", "/metrics/", "/metrics/.", "/metrics//", "/metrics%2F",
            "/v1/../metrics",
        ] {
            let r = try await client.execute(.init(path, method: .get, authority: "localhost"))
            #expect(r.status == .forbidden || r.status == .notFound, "\(path) → \(r.status)")
            #expect(!String(buffer: r.body ?? ByteBuffer()).contains("coffer_"), "\(path)")
        }

        let receipt = try await CofferExecutable.run([
            "sandbox", "receipt", "--dir", data.appendingPathComponent("sandbox").path, "--bundle-id", "com.coffer.demo",
            "--purchase", "com.coffer.demo.levelpack1:880001", "--base64",
        ])
        let redeemed = try await client.execute(
            .init(
                "/v1/redemptions", method: .post, authority: "localhost", headers: [.contentType: "application/json"],
                body: ByteBuffer(string: "{\"receipt\":\"\(receipt.stdout.trimmingCharacters(in: .whitespacesAndNewlines))\"}")))
        #expect(redeemed.status == .created)
        #expect(redeemed.headers[HTTPField.Name("Strict-Transport-Security")!] == "max-age=31536000", "the server block's HSTS")
        // nginx's per-address redemption limit: the burst passes to Coffer (400 for junk), then 429.
        var statuses: [HTTPResponse.Status] = []
        for _ in 0..<3 {
            let junk = try await client.execute(
                .init(
                    "/v1/redemptions", method: .post, authority: "localhost", headers: [.contentType: "application/json"],
                    body: ByteBuffer(string: "{}")))
            statuses.append(junk.status)
        }
        #expect(statuses == [.badRequest, .badRequest, .tooManyRequests], "\(statuses)")
        let object = try #require(
            try JSONSerialization.jsonObject(with: Data(redeemed.body?.readableBytesView ?? ByteBuffer().readableBytesView)) as? [String: Any])
        let url = try #require(((object["assets"] as? [[String: Any]])?.first)?["url"] as? String)
        let token = String(url.dropFirst("/v1/downloads/".count))
        let mac = String(token.split(separator: ".").last ?? "")
        #expect(try await client.execute(.init(url, method: .get, authority: "localhost")).status == .ok)
        for path in [
            "/" + url, "/v1/" + url.dropFirst(3).replacingOccurrences(of: "/downloads", with: "/downloads/"), url + "/",
            "/v1/x/.." + url.dropFirst(3),
        ] {
            let r = try await client.execute(.init(path, method: .get, authority: "localhost"))
            #expect(r.status != .ok, "\(path.prefix(24)) → \(r.status)")
            #expect(!String(buffer: r.body ?? ByteBuffer()).contains(mac))
        }
        let logged = try String(contentsOf: accessLog, encoding: .utf8)
        #expect(logged.contains("/v1/downloads/<redacted>"))
        #expect(!logged.contains(mac), "no token in nginx's access log")
    }
}

enum SHA256Hex {
    static func of(_ bytes: [UInt8]) -> String { bytes.sha256Hex }
}
