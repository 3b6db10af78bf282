import CofferCore
import Foundation

// Rows for ledger and catalogue tests: fixed instants, distinct ids, fake digests.

/// A fixed, exactly representable instant (whole and binary-fraction seconds round-trip
/// through a database's REAL or DOUBLE column).
public func instant(_ offset: Double) -> Date {
    Date(timeIntervalSince1970: 1_700_000_000 + offset)
}

/// A 64-character lower-case hex string derived from `seed` (not a real digest).
public func fakeHash(_ seed: String) -> String {
    let hex = Array(seed.utf8).map { String($0, radix: 16) }.joined()
    return String((hex + String(repeating: "0", count: 64)).prefix(64))
}

/// A Sandbox redemption with distinct ids derived from `transactionId`.
public func makeRedemption(
    _ transactionId: String, original: String? = nil, product: String = "com.example.gems", bundle: String = "com.example.app",
    at offset: Double = 0, purchaseDate: Date? = nil, token: String? = nil
) -> Redemption {
    Redemption(
        redemptionId: "r-\(transactionId)", transactionId: transactionId, originalTransactionId: original, productId: product, bundleId: bundle,
        environment: "Sandbox", purchaseDate: purchaseDate, quantity: 1, receiptSHA256: fakeHash("receipt"), sourceFormat: .signedTransaction,
        redeemedAt: instant(offset), clientAddress: "192.0.2.1", appAccountToken: token, grantHash: fakeHash("grant-\(transactionId)"))
}

/// A rejected attempt.
public func makeAttempt(code: String, transactionId: String?, product: String? = nil, at offset: Double = 0) -> RejectedAttempt {
    RejectedAttempt(
        at: instant(offset), code: code, detail: "detail for \(code)", transactionId: transactionId, productId: product,
        receiptSHA256: fakeHash("attempt"), clientAddress: "198.51.100.7")
}

extension LedgerInsertOutcome {
    /// The inserted row, or nil when the insert was refused.
    public var inserted: Redemption? {
        if case .inserted(let row) = self { return row }
        return nil
    }
}
