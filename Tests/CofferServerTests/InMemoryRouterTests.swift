import CofferCore
import CofferServer
import CofferTestSupport
import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

/// The HTTP API over the in-memory doubles: the server needs nothing but the storage
/// protocols. Downloads go through `ContentStore.read` (the in-memory store keeps no files),
/// the only test of that path, in 5-byte chunks.
@Suite struct InMemoryRouterTests {
    let dependencies: ServerDependencies
    let configuration: CofferConfiguration
    let ledger: InMemoryLedger
    let adminKey: String
    let auditorKey: String
    /// 41 bytes (9 chunks of the store), stored as asset `level-1` of the product `Harness.product`.
    let levelBytes = Array(##"{"level":1,"map":["#S..E#","#..#.#"]}    "##.utf8)

    init() async throws {
        var configuration = CofferConfiguration()
        configuration.anchors = [try Harness.ca.anchor()]
        configuration.bundleIds = [Harness.bundle]
        self.configuration = configuration
        let signer = LedgerSigner(privateKey: .init())
        ledger = InMemoryLedger(signer: signer, checkpointEvery: 3)
        let catalogue = InMemoryCatalogue(adminLog: ledger)
        let keys = InMemoryKeys(adminLog: ledger)
        let content = InMemoryContentStore(chunkSize: 5)
        dependencies = ServerDependencies(
            catalogue: catalogue, ledger: ledger, ledgerAudit: ledger, keys: keys, adminLog: ledger, content: content,
            tokens: TokenSigner(active: TokenKey(id: "k1", key: SymmetricKey(size: .bits256))), ledgerSigner: signer)
        adminKey = try await APIKeys.create(role: .admin, name: "admin", in: keys, signer: signer, now: Date())
        auditorKey = try await APIKeys.create(role: .auditor, name: "auditor", in: keys, signer: signer, now: Date())
        let stored = try await content.write(
            AsyncStream {
                $0.yield(levelBytes); $0.finish()
            }, maxBytes: 1024, expectedSHA256: nil)
        _ = try await catalogue.addAssetVersion(
            assetId: "level-1", name: "level-1.json", contentType: "application/json", size: stored.size, sha256: stored.sha256, at: Date())
        try await catalogue.putProduct(
            Product(
                productId: Harness.product, bundleId: Harness.bundle, type: .nonConsumable, assetIds: ["level-1"], title: "Level Pack 1",
                updatedAt: Date()))
    }

    var app: some ApplicationProtocol {
        Application(router: buildRouter(configuration, dependencies: dependencies, runtime: ServerRuntime(configuration)))
    }

    func bearer(_ key: String) -> HTTPFields { [.authorization: "Bearer \(key)"] }

    func redeem(_ client: some TestClientProtocol, _ transactionId: String, product: String = Harness.product) async throws -> TestResponse {
        try await client.execute(
            uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders,
            body: try Harness.body(["receipt": try Harness.receipt(transactionId, product: product)]))
    }

    @Test func redeemReplayAndDownloadBytesAndRanges() async throws {
        try #require(levelBytes.count == 41)
        #expect(dependencies.content.localFile(sha256: levelBytes.sha256Hex) == nil, "no file: the server must stream ContentStore.read")
        try await app.test(.router) { client in
            let created = try await redeem(client, "9100")
            #expect(created.status == .created)
            let assets = try #require(try Harness.json(created)["assets"] as? [[String: Any]])
            let url = try #require(assets.first?["url"] as? String)
            let replay = try await redeem(client, "9100")
            #expect(replay.status == .conflict)
            #expect(Harness.code(replay) == "alreadyRedeemed")

            let whole = try await client.execute(uri: url, method: .get)
            #expect(whole.status == .ok)
            #expect(Array(whole.body.readableBytesView) == levelBytes)
            #expect(whole.headers[.contentLength] == String(levelBytes.count))
            #expect(whole.headers[.contentType] == "application/json")
            #expect(whole.headers[.eTag] == "\"\(levelBytes.sha256Hex)\"")
            for (range, slice, contentRange) in [
                ("bytes=3-14", levelBytes[3...14], "bytes 3-14/41"), ("bytes=-4", levelBytes[37...40], "bytes 37-40/41"),
                ("bytes=40-", levelBytes[40...40], "bytes 40-40/41"),
            ] {
                let partial = try await client.execute(uri: url, method: .get, headers: [.range: range])
                #expect(partial.status == .partialContent, "\(range)")
                #expect(Array(partial.body.readableBytesView) == Array(slice), "\(range)")
                #expect(partial.headers[.contentRange] == contentRange)
                #expect(partial.headers[.contentLength] == String(slice.count))
            }
            let outside = try await client.execute(uri: url, method: .get, headers: [.range: "bytes=41-50"])
            #expect(outside.status == .rangeNotSatisfiable)
        }
        #expect(await ledger.redemptions(AuditFilter()).map(\.transactionId) == ["9100"])
        #expect(await ledger.attempts(AuditFilter()).map(\.code) == ["alreadyRedeemed"])
    }

    @Test func adminUploadAndProductThenRedeemTheNewProduct() async throws {
        let bytes = Array("level two, in more than one chunk".utf8)
        try await app.test(.router) { client in
            var headers = bearer(adminKey)
            headers[.contentType] = "text/plain"
            let uploaded = try await client.execute(
                uri: "/v1/admin/assets/level-2?name=two.txt", method: .put, headers: headers, body: ByteBuffer(bytes: bytes))
            #expect(uploaded.status == .created)
            #expect(try Harness.json(uploaded)["sha256"] as? String == bytes.sha256Hex)
            let product = ["bundleId": Harness.bundle, "type": "nonConsumable", "assetIds": ["level-2"], "title": "Level Pack 2"] as [String: Any]
            let put = try await client.execute(
                uri: "/v1/admin/products/com.coffer.demo.levelpack2", method: .put, headers: bearer(adminKey), body: try Harness.body(product))
            #expect(put.status == .ok)

            let created = try await redeem(client, "9200", product: "com.coffer.demo.levelpack2")
            #expect(created.status == .created)
            let assets = try #require(try Harness.json(created)["assets"] as? [[String: Any]])
            let url = try #require(assets.first?["url"] as? String)
            let download = try await client.execute(uri: url, method: .get)
            #expect(Array(download.body.readableBytesView) == bytes)
            #expect(download.headers[.contentType] == "text/plain")

            let log = try Harness.json(try await client.execute(uri: "/v1/admin/audit-log", method: .get, headers: bearer(adminKey)))
            let actions = try #require(log["items"] as? [[String: Any]])
            #expect(actions.map { $0["action"] as? String } == ["asset.upload", "product.put"])
            #expect(actions.map { $0["target"] as? String } == ["level-2", "com.coffer.demo.levelpack2"])
        }
    }

    @Test func auditPagesChainedExportAndReadiness() async throws {
        try await app.test(.router) { client in
            #expect(try await client.execute(uri: "/readyz", method: .get).status == .ok)
            for id in ["9301", "9302", "9301", "9303"] { _ = try await redeem(client, id) }
            var cursor: String?
            var pages: [[String]] = []
            repeat {
                let uri = "/v1/audit/redemptions?limit=2" + (cursor.map { "&cursor=\($0)" } ?? "")
                let page = try Harness.json(try await client.execute(uri: uri, method: .get, headers: bearer(auditorKey)))
                pages.append(try #require(page["items"] as? [[String: Any]]).compactMap { $0["transactionId"] as? String })
                cursor = page["nextCursor"] as? String
            } while cursor != nil
            #expect(pages == [["9301", "9302"], ["9303"]])
            let attempts = try Harness.json(try await client.execute(uri: "/v1/audit/attempts", method: .get, headers: bearer(auditorKey)))
            #expect((attempts["items"] as? [[String: Any]])?.map { $0["code"] as? String } == ["alreadyRedeemed"])

            let export = try await client.execute(uri: "/v1/audit/export?kind=ledger", method: .get, headers: bearer(auditorKey))
            #expect(export.status == .ok)
            let report = LedgerExport.verify(Data(export.body.readableBytesView), publicKey: dependencies.ledgerSigner.publicKey)
            #expect(report.intact, "\(String(describing: report.problem))")
            #expect(report.entries == 4 && report.checkpointsVerified == 2, "a checkpoint at 3, the seal at 4")
            let latest = try Harness.json(try await client.execute(uri: "/v1/audit/checkpoints/latest", method: .get, headers: bearer(auditorKey)))
            #expect(latest["sequence"] as? Int == 3)
            #expect(try await client.execute(uri: "/readyz", method: .get).status == .ok)
        }
    }
}
