import CofferCore
import Foundation

@testable import CofferStore

/// A fresh directory under the system temporary directory, removed after `body`.
func withTemporaryDirectory<T>(_ body: (URL) async throws -> T) async throws -> T {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("coffer-store-tests-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: url) }
    return try await body(url)
}

/// A freshly migrated database in a temporary directory, removed after `body`.
func withDatabase<T>(_ body: (CofferDatabase) async throws -> T) async throws -> T {
    try await withTemporaryDirectory { dir in
        let db = try CofferDatabase(path: dir.appendingPathComponent("coffer.sqlite").path)
        return try await body(db)
    }
}

/// A fixed, exactly representable instant (whole and binary-fraction seconds round-trip through REAL).
func instant(_ offset: Double) -> Date {
    Date(timeIntervalSince1970: 1_700_000_000 + offset)
}

/// A 64-character lower-case hex string derived from `seed` (not a real digest).
func fakeHash(_ seed: String) -> String {
    let hex = Array(seed.utf8).map { String($0, radix: 16) }.joined()
    return String((hex + String(repeating: "0", count: 64)).prefix(64))
}

/// A redemption with distinct ids derived from `transactionId`.
func makeRedemption(
    _ transactionId: String, original: String? = nil, product: String = "com.example.gems", bundle: String = "com.example.app",
    at offset: Double = 0, purchaseDate: Date? = nil, token: String? = nil
) -> Redemption {
    Redemption(
        redemptionId: "r-\(transactionId)", transactionId: transactionId, originalTransactionId: original, productId: product, bundleId: bundle,
        environment: "Sandbox", purchaseDate: purchaseDate, quantity: 1, receiptSHA256: fakeHash("receipt"), sourceFormat: .signedTransaction,
        redeemedAt: instant(offset), clientAddress: "192.0.2.1", appAccountToken: token, grantHash: fakeHash("grant-\(transactionId)"))
}

/// A rejected attempt.
func makeAttempt(code: String, transactionId: String?, product: String? = nil, at offset: Double = 0) -> RejectedAttempt {
    RejectedAttempt(
        at: instant(offset), code: code, detail: "detail for \(code)", transactionId: transactionId, productId: product,
        receiptSHA256: fakeHash("attempt"), clientAddress: "198.51.100.7")
}

extension LedgerInsertOutcome {
    /// The inserted row, or nil for `.alreadyRedeemed`.
    var inserted: Redemption? {
        if case .inserted(let row) = self { return row }
        return nil
    }
}

/// Lists every regular file below `url` (relative paths), sorted.
func filesBelow(_ url: URL) -> [String] {
    guard let enumerator = FileManager.default.enumerator(atPath: url.path) else { return [] }
    var files: [String] = []
    while let relative = enumerator.nextObject() as? String {
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: url.appendingPathComponent(relative).path, isDirectory: &isDirectory), !isDirectory.boolValue {
            files.append(relative)
        }
    }
    return files.sorted()
}
