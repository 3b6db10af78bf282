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

/// Two real `coffer serve` processes sharing one PostgreSQL database (a real server) and one
/// bucket (moto, authentication on): each serves what was uploaded through the other.
@Suite(.serialized, .timeLimit(.minutes(5))) struct ObjectStoreScaleOutTests {
    typealias Server = CrashSafetyTests.Server

    static func bytes(_ count: Int, seed: UInt64) -> [UInt8] {
        var rng = SplitMix64(state: seed)
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &rng) }
    }

    static func body(_ response: TestClient.Response) -> [UInt8] { response.body.map { Array($0.readableBytesView) } ?? [] }

    static func client(_ server: Server) -> TestClient {
        let client = TestClient(host: "127.0.0.1", port: server.port, configuration: .init(timeout: .seconds(60)))
        client.connect()
        return client
    }

    /// Uploads `bytes` as a new version of `assetId` through `server`.
    static func upload(_ bytes: [UInt8], assetId: String, to server: Server) async throws {
        let client = Self.client(server)
        defer { Task { try? await client.shutdown() } }
        let response = try await client.execute(
            .init(
                "/v1/admin/assets/\(assetId)", method: .put,
                headers: [.authorization: "Bearer \(server.adminKey)", .contentType: "application/octet-stream"], body: ByteBuffer(bytes: bytes)))
        try #require(response.status == .created, "\(String(buffer: response.body ?? ByteBuffer()))")
    }

    /// Redeems receipts on `server` until the grant's `assetId` is `bytes` (each instance
    /// caches the catalogue for up to 2 s), then downloads it there, whole and in a range.
    static func downloadUntilServed(
        _ bytes: [UInt8], assetId: String, from server: Server, receipts: inout [(String, String)]
    ) async throws {
        let client = Self.client(server)
        defer { Task { try? await client.shutdown() } }
        let deadline = ContinuousClock.now + .seconds(20)
        var url: String?
        var seen: [String] = []
        while url == nil, ContinuousClock.now < deadline, let receipt = receipts.popLast() {
            let created = try await ScaleOutTests.redeem(client, receipt.1)
            try #require(created.status == .created, "\(String(buffer: created.body ?? ByteBuffer()))")
            let json = try #require(try JSONSerialization.jsonObject(with: Data(Self.body(created))) as? [String: Any])
            let asset = (json["assets"] as? [[String: Any]])?.first { $0["assetId"] as? String == assetId }
            seen.append(String(String(decoding: Self.body(created), as: UTF8.self).prefix(300)))
            if asset?["sha256"] as? String == bytes.sha256Hex {
                url = asset?["url"] as? String
            } else {
                try await Task.sleep(for: .milliseconds(300))
            }
        }
        let path = try #require(url, "the other instance's upload never showed here: \(seen.suffix(2))")
        let whole = try await client.execute(.init(path, method: .get))
        #expect(whole.status == .ok)
        #expect(Self.body(whole).sha256Hex == bytes.sha256Hex, "exact bytes")
        let ranged = try await client.execute(.init(path, method: .get, headers: [.range: "bytes=100-199"]))
        #expect(ranged.status == .partialContent && Self.body(ranged) == Array(bytes[100...199]))
    }

    @Test func twoInstancesOnOneDatabaseAndOneBucketServeWhatTheOtherUploaded() async throws {
        let cluster = try await PostgresCluster.shared()
        let url = try await cluster.createDatabase()
        let moto = try await MotoServer.shared()
        let bucket = try await moto.createBucket()
        let root = try makeTemporaryDirectory(prefix: "coffer-s3-scaleout")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("data")
        let arguments = [
            "--database", url, "--content-store", "s3://\(bucket)/game", "--s3-endpoint", moto.endpoint, "--s3-part-size", "5242880",
        ]
        let a = try await Server(dataDirectory: data, arguments: arguments, environment: moto.environment)
        defer { a.kill(SIGKILL) }
        let b = try await Server(dataDirectory: data, arguments: arguments, environment: moto.environment)
        defer { b.kill(SIGKILL) }
        var receipts = try await ScaleOutTests.receipts(data, first: 7100, count: 60)

        let level = Self.bytes(6 * 1024 * 1024 + 11, seed: 41)  // two parts
        try await Self.upload(level, assetId: "levelpack1-levels", to: a)
        try await Self.downloadUntilServed(level, assetId: "levelpack1-levels", from: b, receipts: &receipts)

        let tiles = Self.bytes(70_000, seed: 42)
        try await Self.upload(tiles, assetId: "levelpack1-tiles", to: b)
        try await Self.downloadUntilServed(tiles, assetId: "levelpack1-tiles", from: a, receipts: &receipts)
        #expect(!FileManager.default.fileExists(atPath: data.appendingPathComponent("content/objects").path), "no bytes on local disk")
    }
}
