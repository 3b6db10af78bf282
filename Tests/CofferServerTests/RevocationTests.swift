import CofferCore
import CofferSandbox
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

/// Refunds and revocations: App Store notifications and admins append revocation events;
/// the grant stops minting tokens; the chain covers them.
@Suite struct RevocationTests {
    static func notification(_ type: String, transactionId: String) throws -> ByteBuffer {
        let jws = try Harness.ca.mintNotification(
            type: type, transaction: TransactionSpec(bundleId: Harness.bundle, productId: Harness.product, transactionId: transactionId), now: Date())
        return try Harness.body(["signedPayload": jws])
    }

    @Test func refundNotificationsRevokeRedemptionsAndTheirGrants() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        try await h.app.test(.router) { client in
            let redeemed = try Harness.json(
                try await client.execute(
                    uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders,
                    body: try Harness.body(["receipt": try Harness.receipt("4000")])))
            let grant = try #require(redeemed["grant"] as? String)
            func post(_ body: ByteBuffer) async throws -> TestResponse {
                try await client.execute(uri: "/v1/notifications", method: .post, headers: Harness.jsonHeaders, body: body)
            }
            let refund = try await post(try Self.notification("REFUND", transactionId: "4000"))
            #expect(refund.status == .ok)
            #expect(try Harness.json(refund)["result"] as? String == "revoked")
            #expect(try Harness.json(try await post(try Self.notification("REFUND", transactionId: "4000")))["result"] as? String == "alreadyRevoked")
            #expect(try Harness.json(try await post(try Self.notification("REVOKE", transactionId: "4999")))["result"] as? String == "notRedeemed")
            #expect(try Harness.json(try await post(try Self.notification("DID_RENEW", transactionId: "4000")))["result"] as? String == "ignored")

            let exchange = try await client.execute(
                uri: "/v1/grants/tokens", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["grant": grant]))
            #expect(exchange.status == .forbidden)
            #expect(Harness.code(exchange) == "grantInvalid")

            // Not a notification, or not signed by a trusted chain: refused, nothing recorded.
            let transaction = try Harness.ca.mintTransaction(
                TransactionSpec(bundleId: Harness.bundle, productId: Harness.product, transactionId: "4000"), now: Date())
            let wrongKind = try await post(try Harness.body(["signedPayload": transaction]))
            #expect(wrongKind.status == .unprocessableContent)
            #expect(Harness.code(wrongKind) == "unsupportedFormat")
            let other = try SandboxCA.create(now: Date())
            let forged = try other.mintNotification(
                type: "REFUND", transaction: TransactionSpec(bundleId: Harness.bundle, productId: Harness.product, transactionId: "4000"), now: Date()
            )
            let untrusted = try await post(try Harness.body(["signedPayload": forged]))
            #expect(untrusted.status == .unprocessableContent)
            #expect(try await post(ByteBuffer(string: "{}")).status == .badRequest)

            let listed = try Harness.json(
                try await client.execute(uri: "/v1/audit/revocations", method: .get, headers: h.bearer(h.auditorKey)))
            let items = try #require(listed["items"] as? [[String: Any]])
            #expect(items.count == 2, "the refund of 4000 and the revocation of 4999, kept though never redeemed")
            #expect(items.first?["reason"] as? String == "REFUND")
            #expect(items.first?["source"] as? String == "notification")
            #expect(items.first?["redemptionId"] as? String == redeemed["redemptionId"] as? String)
            #expect(items.last?["redemptionId"] as? String == "")
        }
        let report = try await h.services.ledger.audit(publicKey: h.services.ledgerSigner.publicKey)
        #expect(report.intact)
        #expect(
            report.entries == 4 + 4,
            "the catalogue's 4, the redemption, its revocation, the second refund (counted: a reversal after it must not lift it) and the kept revocation of 4999"
        )
    }

    /// A reason is an admin's free text: logged escaped, as the ledger stores it — a newline
    /// in it cannot forge the next line of the server's log.
    @Test func anAdminsReasonCannotForgeALogLine() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let store = CapturingLogHandler.Store()
        var logger = Logger(label: "capture") { _ in CapturingLogHandler(store: store) }
        logger.logLevel = .notice
        try await h.application(logger: logger).test(.router) { client in
            _ = try await client.execute(
                uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["receipt": try Harness.receipt("4150")]))
            var headers = h.bearer(h.adminKey)
            headers[.contentType] = "application/json"
            let forged = "chargeback\n2026-11-28T00:00:00Z critical: ledger tampered\u{1B}[2J"
            let created = try await client.execute(
                uri: "/v1/admin/revocations", method: .post, headers: headers,
                body: try Harness.body(["transactionId": "4150", "reason": forged]))
            #expect(created.status == .created)
        }
        let line = try #require(store.all.first { $0.contains("admin action") && $0.contains("chargeback") })
        #expect(!line.unicodeScalars.contains { $0.properties.generalCategory == .control }, "\(line)")
        #expect(line.contains("ledger tampered"), "kept, escaped")
    }

    @Test func adminsRevokeWithAReasonAndItIsLogged() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        try await h.app.test(.router) { client in
            _ = try await client.execute(
                uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["receipt": try Harness.receipt("4100")]))
            func revoke(_ id: String, key: String? = nil) async throws -> TestResponse {
                var headers = h.bearer(key ?? h.adminKey)
                headers[.contentType] = "application/json"
                return try await client.execute(
                    uri: "/v1/admin/revocations", method: .post, headers: headers,
                    body: try Harness.body(["transactionId": id, "reason": "chargeback"]))
            }
            let created = try await revoke("4100")
            #expect(created.status == .created)
            #expect(try Harness.json(created)["source"] as? String == "admin")
            let again = try await revoke("4100")
            #expect(again.status == .conflict)
            #expect(Harness.code(again) == "alreadyRevoked")
            let unknown = try await revoke("4101")
            #expect(unknown.status == .notFound)
            #expect(Harness.code(unknown) == "notRedeemed")
            #expect(try await revoke("4100", key: h.auditorKey).status == .forbidden)
        }
        #expect(try await h.services.adminLog.actions(after: 0, limit: 10).map(\.action) == Harness.catalogueActions + ["redemption.revoke"])
        #expect(try await h.services.ledger.audit(publicKey: h.services.ledgerSigner.publicKey).intact)
    }
}
