import CofferCore
import CofferServer
import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

/// Over a real socket.
@Suite struct LiveTests {
    @Test func sixtyFourConcurrentReplaysOfOneTransaction() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let body = try Harness.body(["receipt": try Harness.receipt("7777")])
        try await h.app.test(.live) { client in
            let port = try #require(client.port)
            let statuses = try await withThrowingTaskGroup(of: HTTPResponse.Status.self) { group in
                for _ in 0..<64 {
                    group.addTask {
                        let connection = TestClient(host: "localhost", port: port, configuration: .init(timeout: .seconds(30)))
                        connection.connect()
                        defer { Task { try? await connection.shutdown() } }
                        let response = try await connection.execute(.init("/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: body))
                        return response.status
                    }
                }
                return try await group.reduce(into: [HTTPResponse.Status]()) { $0.append($1) }
            }
            #expect(statuses.filter { $0 == .created }.count == 1)
            #expect(statuses.filter { $0 == .conflict }.count == 63)
        }
        #expect(try await h.services.ledger.redemptions(AuditFilter()).count == 1)
        var filter = AuditFilter()
        filter.limit = 1000
        let attempts = try await h.services.ledger.attempts(filter)
        #expect(attempts.count == 63)
        #expect(attempts.allSatisfy { $0.code == "alreadyRedeemed" && $0.transactionId == "7777" })
    }

    /// Resident set size of this process, from /proc.
    static func residentBytes() -> Int64 {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8),
            let pages = text.split(separator: " ").dropFirst().first.flatMap({ Int64($0) })
        else { return 0 }
        return pages * 4096
    }

    @Test func largeAssetInRangesReassemblesWithFlatMemory() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        // 48 MB of deterministic bytes, written to the content store in 1 MB pieces.
        let size = 48 * 1024 * 1024
        let writer = try h.services.content.makeWriter(maxBytes: Int64(size))
        var expected = SHA256()
        var chunk = [UInt8](repeating: 0, count: 1024 * 1024)
        for block in 0..<48 {
            for i in chunk.indices { chunk[i] = UInt8(truncatingIfNeeded: i &* 31 &+ block &* 7) }
            expected.update(data: chunk)
            try chunk.withUnsafeBytes { try writer.append($0) }
        }
        let stored = try writer.finish(expectedSHA256: nil)
        let expectedHex = expected.finalize().hexString
        _ = try await h.services.catalogue.addAssetVersion(
            assetId: "big", name: "big.bin", contentType: "application/octet-stream", size: stored.size, sha256: stored.sha256, at: Date())
        let token = h.services.vault.tokens.mint(
            DownloadClaims(assetId: "big", sha256: stored.sha256, redemptionId: "r", expiresAt: Int64(Date().timeIntervalSince1970) + 600))
        try await h.app.test(.live) { client in
            var hash = SHA256()
            let before = Self.residentBytes()
            var peak = before
            var offset = 0
            let step = 4 * 1024 * 1024
            while offset < size {
                let end = min(offset + step, size) - 1
                let response = try await client.execute(uri: "/v1/downloads/\(token)", method: .get, headers: [.range: "bytes=\(offset)-\(end)"])
                #expect(response.status == .partialContent)
                #expect(response.headers[.contentRange] == "bytes \(offset)-\(end)/\(size)")
                hash.update(data: Array(response.body.readableBytesView))
                peak = max(peak, Self.residentBytes())
                offset = end + 1
            }
            #expect(hash.finalize().hexString == expectedHex)
            #expect(stored.sha256 == expectedHex)
            // Whole-file buffering would add ≥ 48 MB per request; streaming adds a few chunks.
            #expect(peak - before < 32 * 1024 * 1024, "RSS grew by \((peak - before) / 1024 / 1024) MB")
        }
    }
}
