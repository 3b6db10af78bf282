import CofferCore
import Foundation
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

    @Test(.enabled(if: nginx != nil)) func nginxSendsTheBytesCofferAuthorises() async throws {
        let root = try CrashSafetyTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("data")
        let server = try await CrashSafetyTests.Server(dataDirectory: data, arguments: ["--accel-redirect", "/_coffer/"])
        defer { server.kill(SIGTERM) }

        // nginx: the deploy snippet, aliased to this data directory, in front of this Coffer.
        // Its workers run as root here because the content store is 0700 (deploy/README.md
        // shows the ACL that gives nginx's user read access instead).
        let repo = CrashSafetyTests.Server.contentDirectory.deletingLastPathComponent()
        let snippet = try String(contentsOf: repo.appendingPathComponent("deploy/coffer_accel_location"), encoding: .utf8)
            .replacingOccurrences(of: "/var/lib/coffer/content/", with: data.appendingPathComponent("content").path + "/")
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
                upstream coffer { server 127.0.0.1:\(server.port); }
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
        defer { nginx.terminate() }

        let client = TestClient(host: "127.0.0.1", port: port, configuration: .init(timeout: .seconds(10)))
        var ready = false
        for _ in 0..<50 where !ready {
            try await Task.sleep(for: .milliseconds(100))
            ready = (try? await RawConnection(port: port)) != nil
        }
        try #require(ready, "nginx did not start")
        client.connect()
        defer { Task { try? await client.shutdown() } }

        // Redeem through nginx, then download: the body comes from nginx's sendfile.
        let receipt = try LedgerTamperTests.coffer([
            "sandbox", "receipt", "--dir", data.appendingPathComponent("sandbox").path, "--bundle-id", "com.coffer.demo",
            "--purchase", "com.coffer.demo.levelpack1:880000", "--base64",
        ])
        let redeemed = try await client.execute(
            .init(
                "/v1/redemptions", method: .post, authority: "localhost", headers: [.contentType: "application/json"],
                body: ByteBuffer(string: "{\"receipt\":\"\(receipt.stdout.trimmingCharacters(in: .whitespacesAndNewlines))\"}")))
        #expect(redeemed.status == .created)
        let object = try #require(
            try JSONSerialization.jsonObject(with: Data(redeemed.body?.readableBytesView ?? ByteBuffer().readableBytesView)) as? [String: Any])
        let asset = try #require((object["assets"] as? [[String: Any]])?.first)
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

        let ranged = try await client.execute(.init(url, method: .get, authority: "localhost", headers: [.range: "bytes=0-9"]))
        #expect(ranged.status == .partialContent)
        #expect(Array(ranged.body?.readableBytesView ?? ByteBuffer().readableBytesView) == Array(bytes.prefix(10)))

        // Coffer still decides: a bad token is its 403, and the internal location is unreachable.
        let forged = try await client.execute(.init("/v1/downloads/v1.k1.AAAA.AAAA", method: .get, authority: "localhost"))
        #expect(forged.status == .forbidden)
        let direct = try await client.execute(.init("/_coffer/objects/\(sha.prefix(2))/\(sha.dropFirst(2))", method: .get, authority: "localhost"))
        #expect(direct.status == .notFound)
    }
}

enum SHA256Hex {
    static func of(_ bytes: [UInt8]) -> String { bytes.sha256Hex }
}
