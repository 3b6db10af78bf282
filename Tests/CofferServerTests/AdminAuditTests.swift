import CofferApp
import CofferCore
import CofferServer
import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

@testable import CofferStore

@Suite struct AdminAuditTests {
    @Test func authentication() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        try await h.app.test(.router) { client in
            let none = try await client.execute(uri: "/v1/admin/assets", method: .get)
            #expect(none.status == .unauthorized)
            #expect(Harness.code(none) == "unauthenticated")
            #expect(none.headers[.wwwAuthenticate] == "Bearer")
            let wrong = try await client.execute(uri: "/v1/admin/assets", method: .get, headers: h.bearer("cof_admin_wrong"))
            #expect(wrong.status == .unauthorized)
            let auditorOnAdmin = try await client.execute(uri: "/v1/admin/assets", method: .get, headers: h.bearer(h.auditorKey))
            #expect(auditorOnAdmin.status == .forbidden)
            #expect(Harness.code(auditorOnAdmin) == "forbidden")
            #expect(try await client.execute(uri: "/v1/admin/assets", method: .get, headers: h.bearer(h.adminKey)).status == .ok)
            #expect(try await client.execute(uri: "/v1/audit/redemptions", method: .get, headers: h.bearer(h.auditorKey)).status == .ok)
            #expect(try await client.execute(uri: "/v1/audit/redemptions", method: .get, headers: h.bearer(h.adminKey)).status == .ok)
            #expect(try await client.execute(uri: "/v1/audit/redemptions", method: .get).status == .unauthorized)
        }
        // A revoked key stops working.
        let found = try #require(try await h.services.keys.key(secretHash: APIKeys.hash(h.adminKey)))
        #expect(try await h.services.keys.revoke(keyId: found.keyId, at: Date()))
        try await h.app.test(.router) { client in
            let revoked = try await client.execute(uri: "/v1/admin/assets", method: .get, headers: h.bearer(h.adminKey))
            #expect(revoked.status == .unauthorized)
        }
    }

    @Test func assetsAndProducts() async throws {
        let h = try await Harness.make(uploadLimit: 1024)
        defer { h.cleanUp() }
        let admin = h.bearer(h.adminKey)
        try await h.app.test(.router) { client in
            let bytes = Array("level two".utf8)
            var headers = admin
            headers[.contentType] = "application/json"
            let created = try await client.execute(
                uri: "/v1/admin/assets/level-2?name=two.json", method: .put, headers: headers, body: ByteBuffer(bytes: bytes))
            #expect(created.status == .created)
            let asset = try Harness.json(created)
            #expect(asset["sha256"] as? String == bytes.sha256Hex)
            #expect(asset["version"] as? Int == 1)
            #expect(asset["name"] as? String == "two.json")
            #expect(asset["contentType"] as? String == "application/json")

            // Re-upload: a new version. With a correct Content-Digest.
            let v2 = Array("level two, remastered".utf8)
            var digestHeaders = admin
            digestHeaders[HTTPField.Name("Content-Digest") ?? .contentType] = "sha-256=:\(Data(SHA256.hash(data: v2)).base64EncodedString()):"
            let second = try await client.execute(uri: "/v1/admin/assets/level-2", method: .put, headers: digestHeaders, body: ByteBuffer(bytes: v2))
            #expect(second.status == .created)
            #expect(try Harness.json(second)["version"] as? Int == 2)
            let fetched = try await client.execute(uri: "/v1/admin/assets/level-2", method: .get, headers: admin)
            #expect(try Harness.json(fetched)["sha256"] as? String == v2.sha256Hex)

            // Wrong digest, too large, bad id, unknown asset.
            digestHeaders[HTTPField.Name("Content-Digest") ?? .contentType] = "sha-256=:\(Data(SHA256.hash(data: bytes)).base64EncodedString()):"
            let mismatch = try await client.execute(
                uri: "/v1/admin/assets/level-3", method: .put, headers: digestHeaders, body: ByteBuffer(bytes: v2))
            #expect(mismatch.status == .badRequest)
            #expect(Harness.code(mismatch) == "digestMismatch")
            let large = try await client.execute(
                uri: "/v1/admin/assets/level-3", method: .put, headers: admin, body: ByteBuffer(repeating: 1, count: 2048))
            #expect(large.status == .contentTooLarge)
            #expect(Harness.code(large) == "payloadTooLarge")
            let badId = try await client.execute(uri: "/v1/admin/assets/..%2Fetc", method: .put, headers: admin, body: ByteBuffer(bytes: bytes))
            #expect(badId.status == .badRequest)
            #expect(try await client.execute(uri: "/v1/admin/assets/level-3", method: .get, headers: admin).status == .notFound)
            let list = try await client.execute(uri: "/v1/admin/assets", method: .get, headers: admin)
            #expect(try JSONSerialization.jsonObject(with: Data(list.body.readableBytesView)) as? [Any] != nil)

            // Products.
            let product = try await client.execute(
                uri: "/v1/admin/products/com.coffer.demo.levelpack3", method: .put, headers: admin,
                body: try Harness.body(["bundleId": Harness.bundle, "type": "consumable", "assetIds": ["level-2"], "title": "Pack 3"]))
            #expect(product.status == .ok)
            let unknownAsset = try await client.execute(
                uri: "/v1/admin/products/com.coffer.demo.levelpack4", method: .put, headers: admin,
                body: try Harness.body(["bundleId": Harness.bundle, "type": "consumable", "assetIds": ["nope"], "title": "Pack 4"]))
            #expect(unknownAsset.status == .unprocessableContent)
            #expect(Harness.code(unknownAsset) == "unknownAsset")
            let badType = try await client.execute(
                uri: "/v1/admin/products/com.coffer.demo.levelpack4", method: .put, headers: admin,
                body: try Harness.body(["bundleId": Harness.bundle, "type": "subscription", "assetIds": [], "title": "Pack 4"]))
            #expect(badType.status == .badRequest)
            let products = try await client.execute(uri: "/v1/admin/products", method: .get, headers: admin)
            #expect((try JSONSerialization.jsonObject(with: Data(products.body.readableBytesView)) as? [Any])?.count == 3)
            #expect(
                try await client.execute(uri: "/v1/admin/products/com.coffer.demo.levelpack3", method: .delete, headers: admin).status == .noContent)
            let gone = try await client.execute(uri: "/v1/admin/products/com.coffer.demo.levelpack3", method: .delete, headers: admin)
            #expect(gone.status == .notFound)
            #expect(Harness.code(gone) == "unknownProduct")

            // Every successful admin action is in the admin log, with who did it; refused ones are not.
            let log = try Harness.json(try await client.execute(uri: "/v1/admin/audit-log", method: .get, headers: admin))
            // After the harness's own catalogue entries.
            let items = Array(try #require(log["items"] as? [[String: Any]]).dropFirst(Harness.catalogueActions.count))
            #expect(items.map { $0["action"] as? String } == ["asset.upload", "asset.upload", "product.put", "product.delete"])
            #expect(items.map { $0["target"] as? String } == ["level-2", "level-2", "com.coffer.demo.levelpack3", "com.coffer.demo.levelpack3"])
            #expect(items.allSatisfy { $0["keyName"] as? String == "test admin" })
            #expect((items.first?["detail"] as? String)?.contains(bytes.sha256Hex) == true)
            let page = try Harness.json(try await client.execute(uri: "/v1/admin/audit-log?limit=3", method: .get, headers: admin))
            #expect(page["nextCursor"] as? String == "3")
            #expect(try await client.execute(uri: "/v1/admin/audit-log", method: .get, headers: h.bearer(h.auditorKey)).status == .forbidden)
        }
    }

    /// The admin log refuses its insert (a trigger here; a full disk, a lost database there):
    /// each admin change is a 503 and is not made, and with the log back the same requests
    /// succeed with their entries.
    @Test func anAdminChangeIsNotMadeWhenItsLogEntryCannotBe() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let admin = h.bearer(h.adminKey)
        @Sendable func logDown(_ down: Bool) async throws {
            try await h.services.database.pool.write { db in
                try db.execute(
                    sql: down
                        ? "CREATE TRIGGER test_admin_log_down BEFORE INSERT ON admin_actions BEGIN SELECT RAISE(ABORT, 'admin log down'); END"
                        : "DROP TRIGGER test_admin_log_down")
            }
        }
        try await h.app.test(.router) { client in
            let r = try await client.execute(
                uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["receipt": try Harness.receipt("70")]))
            #expect(r.status == .created)
            let requests: [(uri: String, method: HTTPRequest.Method, body: ByteBuffer)] = [
                ("/v1/admin/assets/level-9", .put, ByteBuffer(string: "level nine")),
                ("/v1/admin/assets/level-1", .put, ByteBuffer(string: "level one, second version")),
                (
                    "/v1/admin/products/com.coffer.demo.levelpack3", .put,
                    try Harness.body(["bundleId": Harness.bundle, "type": "consumable", "assetIds": ["tiles"], "title": "Pack 3"])
                ),
                ("/v1/admin/products/com.coffer.demo.levelpack2", .delete, ByteBuffer()),
                ("/v1/admin/revocations", .post, try Harness.body(["transactionId": "70", "reason": "chargeback"])),
            ]
            try await logDown(true)
            for request in requests {
                let refused = try await client.execute(uri: request.uri, method: request.method, headers: admin, body: request.body)
                #expect(refused.status == .serviceUnavailable, "\(request.method) \(request.uri)")
                #expect(Harness.code(refused) == "storageUnavailable", "\(request.method) \(request.uri)")
            }
            // Nothing of them was made.
            #expect(try await client.execute(uri: "/v1/admin/assets/level-9", method: .get, headers: admin).status == .notFound)
            #expect(try await h.services.catalogue.versions(of: "level-1").count == 1)
            #expect(try await h.services.catalogue.product("com.coffer.demo.levelpack3") == nil)
            #expect(try await h.services.catalogue.product("com.coffer.demo.levelpack2") != nil)
            #expect(try await h.services.ledger.revocations(after: 0, limit: 10).isEmpty)
            #expect(try await h.services.adminLog.actions(after: 0, limit: 10).map(\.action) == Harness.catalogueActions)

            try await logDown(false)
            var expected: [HTTPResponse.Status] = [.created, .created, .ok, .noContent, .created]
            for request in requests {
                let made = try await client.execute(uri: request.uri, method: request.method, headers: admin, body: request.body)
                #expect(made.status == expected.removeFirst(), "\(request.method) \(request.uri)")
            }
            let log = try Harness.json(try await client.execute(uri: "/v1/admin/audit-log", method: .get, headers: admin))
            let items = Array(try #require(log["items"] as? [[String: Any]]).dropFirst(Harness.catalogueActions.count))
            #expect(
                items.map { $0["action"] as? String }
                    == ["asset.upload", "asset.upload", "product.put", "product.delete", "redemption.revoke"])
            #expect(items.map { $0["detail"] as? String }.first??.hasPrefix("version 1, 10 bytes, sha256 ") == true)
            #expect(items.map { $0["detail"] as? String }[1]?.hasPrefix("version 2, 25 bytes, sha256 ") == true)
        }
    }

    @Test func auditQueriesPagingAndExport() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let auditor = h.bearer(h.auditorKey)
        try await h.app.test(.router) { client in
            for id in ["10", "11", "12"] {
                let r = try await client.execute(
                    uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["receipt": try Harness.receipt(id)]))
                #expect(r.status == .created)
            }
            _ = try await client.execute(
                uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["receipt": try Harness.receipt("10")]))

            let page1 = try Harness.json(try await client.execute(uri: "/v1/audit/redemptions?limit=2", method: .get, headers: auditor))
            #expect((page1["items"] as? [[String: Any]])?.map { $0["transactionId"] as? String } == ["10", "11"])
            let cursor = try #require(page1["nextCursor"] as? String)
            let page2 = try Harness.json(
                try await client.execute(uri: "/v1/audit/redemptions?limit=2&cursor=\(cursor)", method: .get, headers: auditor))
            #expect((page2["items"] as? [[String: Any]])?.map { $0["transactionId"] as? String } == ["12"])
            #expect(page2["nextCursor"] == nil)

            let filtered = try Harness.json(try await client.execute(uri: "/v1/audit/redemptions?transactionId=11", method: .get, headers: auditor))
            #expect((filtered["items"] as? [Any])?.count == 1)
            let byProduct = try Harness.json(
                try await client.execute(
                    uri: "/v1/audit/redemptions?productId=\(Harness.product)&bundleId=\(Harness.bundle)", method: .get, headers: auditor))
            #expect((byProduct["items"] as? [Any])?.count == 3)
            let future = try Harness.json(
                try await client.execute(uri: "/v1/audit/redemptions?from=2999-01-01T00:00:00Z", method: .get, headers: auditor))
            #expect((future["items"] as? [Any])?.count == 0)
            let attempts = try Harness.json(try await client.execute(uri: "/v1/audit/attempts?code=alreadyRedeemed", method: .get, headers: auditor))
            #expect((attempts["items"] as? [[String: Any]])?.first?["transactionId"] as? String == "10")

            // A filter a listing does not apply is refused, never ignored (every row, believed filtered).
            for uri in [
                "/v1/audit/attempts?playerId=alice", "/v1/audit/redemptions?code=alreadyRedeemed", "/v1/audit/deliveries?transactionId=10",
                "/v1/audit/deliveries?from=2026-01-01T00:00:00Z", "/v1/audit/events?playerId=alice", "/v1/audit/revocations?transactionId=10",
                "/v1/audit/export?kind=attempts&playerId=alice", "/v1/audit/export?kind=deliveries&from=2026-01-01T00:00:00Z",
                "/v1/audit/export?kind=ledger&transactionId=10", "/v1/audit/export?kind=redemptions&redemptionId=r-1",
                // A name no route knows (a typo) is refused the same way.
                "/v1/audit/attempts?playerID=alice", "/v1/audit/redemptions?player_id=alice", "/v1/audit/export?kind=attempts&codes=x",
                "/v1/audit/events?format=csv", "/v1/audit/export?kind=ledger&limit=5",
            ] {
                let refused = try await client.execute(uri: uri, method: .get, headers: auditor)
                #expect(refused.status == .badRequest && Harness.code(refused) == "malformedRequest", "\(uri)")
            }
            for uri in [
                "/v1/audit/attempts?transactionId=10&productId=p&code=c&from=2026-01-01T00:00:00Z&to=2999-01-01T00:00:00Z",
                "/v1/audit/deliveries?redemptionId=r-1", "/v1/audit/export?kind=attempts&code=alreadyRedeemed",
                "/v1/audit/export?kind=deliveries&redemptionId=r-1", "/v1/audit/export?kind=redemptions&limit=5&cursor=0&format=csv",
                "/v1/audit/revocations?limit=5&cursor=0",
            ] {
                #expect(try await client.execute(uri: uri, method: .get, headers: auditor).status == .ok, "\(uri)")
            }

            let badLimit = try await client.execute(uri: "/v1/audit/redemptions?limit=0", method: .get, headers: auditor)
            #expect(badLimit.status == .badRequest)
            let badDate = try await client.execute(uri: "/v1/audit/attempts?from=yesterday", method: .get, headers: auditor)
            #expect(badDate.status == .badRequest)

            let ndjson = try await client.execute(uri: "/v1/audit/export?format=ndjson", method: .get, headers: auditor)
            #expect(ndjson.headers[.contentType] == "application/x-ndjson")
            let lines = String(decoding: ndjson.body.readableBytesView, as: UTF8.self).split(separator: "\n")
            #expect(lines.count == 3)
            #expect(lines.allSatisfy { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) != nil })
            let csv = try await client.execute(uri: "/v1/audit/export?format=csv&kind=attempts", method: .get, headers: auditor)
            let csvLines = String(decoding: csv.body.readableBytesView, as: UTF8.self).split(separator: "\n")
            #expect(csvLines.first?.hasPrefix("sequence,at,code") == true)
            #expect(csvLines.count == 2)
            #expect(try await client.execute(uri: "/v1/audit/export?format=xml", method: .get, headers: auditor).status == .badRequest)
        }
    }

    @Test(
        "a filter no stored identifier can match — a NUL, a control character, over 128 bytes — is 400, never sent to the database (SQLite cut it at the NUL, PostgreSQL refused it: 503)"
    )
    func identifierFiltersAreChecked() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let auditor = h.bearer(h.auditorKey)
        try await h.app.test(.router) { client in
            let r = try await client.execute(
                uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["receipt": try Harness.receipt("11")]))
            #expect(r.status == .created)
            let long = String(repeating: "1", count: 129)
            for query in [
                "redemptions?transactionId=11%00x", "redemptions?productId=%00", "redemptions?bundleId=a%0Ab", "redemptions?playerId=",
                "redemptions?originalTransactionId=\(long)", "attempts?code=already%00Redeemed", "deliveries?redemptionId=%00",
                "export?format=csv&transactionId=11%00", "export?kind=deliveries&redemptionId=%1B",
            ] {
                let response = try await client.execute(uri: "/v1/audit/\(query)", method: .get, headers: auditor)
                #expect(response.status == .badRequest, "\(query): \(response.status)")
                #expect(Harness.code(response) == "malformedRequest", "\(query)")
            }
            let exact = try Harness.json(try await client.execute(uri: "/v1/audit/redemptions?transactionId=11", method: .get, headers: auditor))
            #expect((exact["items"] as? [Any])?.count == 1)
            let longest = try await client.execute(
                uri: "/v1/audit/redemptions?transactionId=\(String(repeating: "1", count: 128))", method: .get, headers: auditor)
            #expect(longest.status == .ok)

            // An asset id no upload could have made is unknown, without a lookup.
            let admin = h.bearer(h.adminKey)
            for id in ["level\u{0}1", "", String(repeating: "a", count: 129)] {
                let product = try await client.execute(
                    uri: "/v1/admin/products/com.coffer.demo.levelpack9", method: .put, headers: admin,
                    body: try Harness.body(["bundleId": Harness.bundle, "type": "consumable", "assetIds": [id], "title": "Pack 9"]))
                #expect(product.status == .unprocessableContent, "\(id.debugDescription): \(product.status)")
                #expect(Harness.code(product) == "unknownAsset")
            }
        }
    }
}
