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

    /// DER of tag and content (short or long form length).
    static func der(_ tag: UInt8, _ content: [UInt8]) -> [UInt8] {
        let n = content.count
        let length: [UInt8] = n < 128 ? [UInt8(n)] : n < 256 ? [0x81, UInt8(n)] : [0x82, UInt8(n >> 8), UInt8(n & 0xFF)]
        return [tag] + length + content
    }

    /// A receipt attribute: SEQUENCE { INTEGER type, INTEGER 1, OCTET STRING value }.
    static func attribute(_ type: Int, _ value: [UInt8]) -> [UInt8] {
        let typeBytes: [UInt8] = type < 128 ? [UInt8(type)] : [UInt8(type >> 8), UInt8(type & 0xFF)]
        return der(0x30, der(0x02, typeBytes) + der(0x02, [1]) + der(0x04, value))
    }

    /// A repeated in-app attribute is refused, as a repeated payload attribute is: the second
    /// would replace the first (an empty 1712 after a refund date cleared the refund).
    @Test func aRepeatedInAppAttributeIsMalformed() throws {
        let refunded = Self.der(0x16, Array("2026-01-02T03:04:05Z".utf8))
        func payload(_ inApp: [[UInt8]]) -> ArraySlice<UInt8> {
            let record = Self.der(0x31, inApp.flatMap { $0 })
            let set = Self.der(0x31, Self.attribute(2, Self.der(0x0C, Array("com.coffer.demo".utf8))) + Self.attribute(17, record))
            return set[...]
        }
        let once = try AppReceipt.decode(
            payload([
                Self.attribute(1702, Self.der(0x0C, Array("p".utf8))), Self.attribute(1703, Self.der(0x0C, Array("1".utf8))),
                Self.attribute(1712, refunded),
            ]))
        #expect(once.inApp.first?.cancellationDate != nil)
        #expect(once.inApp.first?.productId == "p")
        for (type, first, second) in [(1712, refunded, [UInt8]()), (1702, Self.der(0x0C, Array("cheap".utf8)), Self.der(0x0C, Array("dear".utf8)))] {
            #expect(throws: VerificationError.self) {
                _ = try AppReceipt.decode(payload([Self.attribute(type, first), Self.attribute(type, second)]))
            }
            do {
                _ = try AppReceipt.decode(payload([Self.attribute(type, first), Self.attribute(type, second)]))
            } catch {
                #expect(error.code == .malformed && error.detail.contains("in-app attribute \(type) appears twice"), "\(error)")
            }
        }
    }
}
