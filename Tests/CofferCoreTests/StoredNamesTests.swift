import CofferCore
import Foundation
import Testing

/// Names the ledger stores and hashes as text: their raw values never change, and a row with
/// text this build does not know still loads (its typed view is nil; the audit judges its hash).
@Suite("Stored names")
struct StoredNamesTests {
    @Test func rawValuesAreStable() {
        #expect(
            AdminActionName.allCases.map(\.rawValue) == [
                "asset.upload", "product.put", "product.delete", "redemption.revoke", "key.create", "key.revoke", "ledger.adopt", "asset.forget",
            ])
        #expect(RedemptionStatus.allCases.map(\.rawValue) == ["redeemed"])
        #expect(Environment.allCases.map(\.rawValue) == ["Production", "Sandbox", "Xcode", "LocalTesting"])
    }

    @Test func typedViewsOverStoredText() {
        var row = Redemption(
            redemptionId: "r", transactionId: "t", originalTransactionId: nil, productId: "p", bundleId: "b", environment: "Sandbox",
            purchaseDate: nil, quantity: 1, receiptSHA256: String(repeating: "0", count: 64), sourceFormat: .signedTransaction,
            redeemedAt: Date(timeIntervalSince1970: 0), clientAddress: "192.0.2.1", appAccountToken: nil, grantHash: "g")
        #expect(row.knownEnvironment == .sandbox)
        #expect(row.knownStatus == .redeemed)
        row.environment = "Sandbox\u{0}edited"
        row.status = "refunded"
        #expect(row.knownEnvironment == nil)
        #expect(row.knownStatus == nil)
        let action = AdminAction(at: Date(), keyId: "k", keyName: "n", action: .productPut, target: "p", detail: "", clientAddress: "local")
        #expect(action.action == "product.put")
        #expect(action.name == .productPut)
        let attempt = RejectedAttempt(
            at: Date(), code: "alreadyRedeemed", detail: "", transactionId: nil, productId: nil, receiptSHA256: "", clientAddress: "x")
        #expect(attempt.knownCode == .alreadyRedeemed)
    }
}
