import Benchmark
import CofferCore
import CofferSandbox
import CofferStore
import Crypto
import Foundation

/// Real vectors live with the tests (see Tests/CofferCoreTests/Fixtures/PROVENANCE.md).
func fixture(_ path: String) -> [UInt8] {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    let url = root.appendingPathComponent("Tests/CofferCoreTests/Fixtures").appendingPathComponent(path)
    guard let data = FileManager.default.contents(atPath: url.path) else { fatalError("missing fixture \(path)") }
    return [UInt8](data)
}

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.throughput, .wallClock, .mallocCountTotal],
        warmupIterations: 10,
        maxDuration: .seconds(3),
        maxIterations: 1_000_000)

    let now = Date()
    let apple: AppStoreVerifier
    let sandbox: AppStoreVerifier
    let ca: SandboxCA
    do {
        apple = AppStoreVerifier(configuration: VerifierConfiguration(anchors: try TrustAnchor.appleRoots(allowSandbox: true), bundleIds: nil))
        ca = try SandboxCA.create(now: now)
        sandbox = AppStoreVerifier(configuration: VerifierConfiguration(anchors: [try ca.anchor()], bundleIds: ["com.coffer.bench"]))
    } catch {
        fatalError("benchmark setup: \(error)")
    }

    func verifyLoop(_ name: String, _ verifier: AppStoreVerifier, _ input: [UInt8]) {
        Benchmark(name) { benchmark in
            for _ in benchmark.scaledIterations {
                blackHole(await verifier.verify(input, now: now).isValid)
            }
        }
    }

    verifyLoop("legacy: L01 real SHA-256 (4 records)", apple, fixture("legacy/L01_tp_production_getpure_2024.der"))
    verifyLoop("legacy: L11 real SHA-1 (9 records)", apple, fixture("legacy/L11_rc_sandbox_revenuecat_sample1_2020.der"))
    verifyLoop("legacy: L03 real SHA-1 (187 records, 79 KB)", apple, fixture("legacy/L03_tp_sandbox_nutcall_187iap_2020.der"))

    var spec = ReceiptSpec(bundleId: "com.coffer.bench", purchases: [PurchaseSpec(productId: "level.pack.1", transactionId: "1")])
    spec.purchases.append(PurchaseSpec(productId: "level.pack.2", transactionId: "2"))
    guard let small = try? ca.mintReceipt(spec, now: now) else { fatalError("mint") }
    verifyLoop("legacy: sandbox SHA-256 (2 records)", sandbox, small)

    verifyLoop("jws: J02 real transaction", apple, fixture("jws/J02_real_sandbox_transaction_consumable_goodheart_2025_mingos.jws"))
    verifyLoop("jws: J10 real notification (3 signatures)", apple, fixture("jws/J10_real_sandbox_notification_DID_RENEW_1759302518835_session.jws"))
    guard let jws = try? ca.mintTransaction(TransactionSpec(bundleId: "com.coffer.bench", productId: "level.pack.1", transactionId: "9"), now: now)
    else {
        fatalError("mint")
    }
    verifyLoop("jws: sandbox transaction", sandbox, Array(jws.utf8))

    // Download tokens: minted per asset at redemption, verified on every download request.
    let signer = TokenSigner(active: TokenKey(id: "k1", key: SymmetricKey(size: .bits256)))
    let claims = DownloadClaims(
        assetId: "levelpack1-levels", sha256: String(repeating: "ab", count: 32), redemptionId: "0f4c6a57-8f0e-4a39-9d53-2a4f6b1c9e11",
        expiresAt: Int64(now.timeIntervalSince1970) + 600)
    let token = signer.mint(claims)
    Benchmark("token: mint") { benchmark in
        for _ in benchmark.scaledIterations { blackHole(signer.mint(claims)) }
    }
    Benchmark("token: verify") { benchmark in
        for _ in benchmark.scaledIterations { blackHole(try? signer.verify(token, now: now)) }
    }

    // Ledger appends on a real SQLite file (WAL, synchronous=FULL), one at a time and 64 at
    // once (group commit: one transaction, one fsync for the batch). Throughput is rows/s.
    func ledger() -> SQLiteLedger {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("coffer-bench-\(UUID().uuidString).sqlite").path
        guard let db = try? CofferDatabase(path: path) else { fatalError("database") }
        return SQLiteLedger(db)
    }
    func redemption() -> Redemption {
        let id = UUID().uuidString.lowercased()
        return Redemption(
            redemptionId: id, transactionId: id, originalTransactionId: nil, productId: "p", bundleId: "b", environment: "Sandbox",
            purchaseDate: now, quantity: 1, receiptSHA256: String(repeating: "cd", count: 32), sourceFormat: .appReceipt, redeemedAt: now,
            clientAddress: "127.0.0.1", appAccountToken: nil, grantHash: id)
    }
    let sequential = ledger()
    Benchmark("ledger: append, one at a time", configuration: .init(maxDuration: .seconds(3), maxIterations: 20_000)) { benchmark in
        for _ in benchmark.scaledIterations { blackHole(try? await sequential.insert(redemption())) }
    }
    let grouped = ledger()
    Benchmark(
        "ledger: append, 64 concurrent (group commit)",
        configuration: .init(metrics: [.throughput, .wallClock], maxDuration: .seconds(3), maxIterations: 2_000, thresholds: nil)
    ) { benchmark in
        for _ in benchmark.scaledIterations {
            await withTaskGroup(of: Void.self) { group in
                for _ in 0..<64 { group.addTask { blackHole(try? await grouped.insert(redemption())) } }
            }
        }
    }
}
