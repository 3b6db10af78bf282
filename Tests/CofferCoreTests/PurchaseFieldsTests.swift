import CofferCore
import CofferSandbox
import Foundation
import Testing

/// What the vault needs to tell an expired subscription from a one-time purchase: the product
/// type and expiry of a StoreKit 2 transaction, the expiry and cancellation of a legacy record.
@Suite struct PurchaseFieldsTests {
    func transaction(_ result: VerificationResult) throws -> SignedTransaction {
        guard case .transaction(let t) = result.evidence.signed else { throw Fixtures.Missing(path: "transaction") }
        return t
    }

    @Test func realSignedTransactionsCarryTypeAndExpiry() async throws {
        let verifier = try appleVerifier()
        let renewable = try transaction(
            await verifier.verify(Array(try Fixtures.text("jws/J10a_real_sandbox_txn_nested_in_J10_session.jws").utf8), now: testNow))
        #expect(renewable.productType == .autoRenewableSubscription)
        let payload = try #require(
            try Fixtures.entries("jws").first { $0["file"] as? String == "jws/J10a_real_sandbox_txn_nested_in_J10_session.jws" }?["payload"]
                as? [String: Any])
        let expires = try #require((payload["expiresDate"] as? NSNumber)?.doubleValue)
        #expect(renewable.expiresDate?.date == Date(timeIntervalSince1970: expires / 1000))
        let consumable = try transaction(
            await verifier.verify(Array(try Fixtures.text(RealJWSTests.appleJWS[0]).utf8), now: testNow))
        #expect(consumable.productType == .consumable)
        #expect(consumable.expiresDate == nil)
    }

    @Test(arguments: AppStoreProductType.allCases)
    func sandboxTransactionsCarryTypeAndExpiry(type: AppStoreProductType) async throws {
        var spec = TransactionSpec(bundleId: "com.coffer.demo", productId: "season.pass", transactionId: "9100")
        spec.type = type.rawValue
        spec.expiresDate = testNow.addingTimeInterval(-86400)
        let jws = try sharedCA.mintTransaction(spec, now: testNow)
        let t = try transaction(try await sandboxVerifier().verify(Array(jws.utf8), now: testNow))
        #expect(t.productType == type)
        #expect(t.type == type.rawValue)
        #expect(t.expiresDate?.date == testNow.addingTimeInterval(-86400))
    }

    @Test func unknownTypeIsNoProductType() {
        var t = SignedTransaction()
        t.type = "Subscription Of The Future"
        #expect(t.productType == nil)
        t.type = nil
        #expect(t.productType == nil)
    }

    @Test func legacyRecordsCarryExpiryAndCancellation() async throws {
        // L08: EmmiView's one-month subscription (expires date and web order line item, no
        // cancellation).
        let l08 = try await appleVerifier().verify(try Fixtures.bytes("legacy/L08_kvitto_sandbox_emmiview_6iap_2015.der"), now: testNow)
        let first = try #require(l08.evidence.receipt?.inApp.first)
        #expect(first.productId == "com.cocoanetics.EmmiView.OneMonth")
        #expect(first.expiresDate != nil)
        #expect(first.webOrderLineItemId != nil)
        #expect(first.cancellationDate == nil)

        var purchase = PurchaseSpec(productId: "season.pass", transactionId: "9200")
        purchase.expiresDate = testNow.addingTimeInterval(-3600)
        purchase.cancellationDate = testNow.addingTimeInterval(-7200)
        purchase.webOrderLineItemId = 77
        let receipt = try sharedCA.mintReceipt(ReceiptSpec(bundleId: "com.coffer.demo", purchases: [purchase]), now: testNow)
        let record = try #require(try await sandboxVerifier().verify(receipt, now: testNow).evidence.receipt?.inApp.first)
        #expect(record.expiresDate == testNow.addingTimeInterval(-3600))
        #expect(record.cancellationDate == testNow.addingTimeInterval(-7200))
        #expect(record.webOrderLineItemId == 77)
    }
}
