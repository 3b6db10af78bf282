import CofferApp
import CofferCore
import CofferSandbox
import CofferServer
import CofferStore
import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

/// A real data directory (SQLite, content store, key file) in a temporary folder, a
/// sandbox CA trusted for LocalTesting, one product with two assets, and two keys.
struct Harness {
    static let bundle = "com.coffer.demo"
    static let product = "com.coffer.demo.levelpack1"
    static let ca: SandboxCA = {
        do { return try SandboxCA.create(now: Date()) } catch { fatalError("sandbox CA: \(error)") }
    }()

    let directory: URL
    let services: SQLiteStorage
    /// The server's metrics and upload gate (shared by every `app` of this harness).
    let runtime: ServerRuntime
    let adminKey: String
    let auditorKey: String
    let levelBytes: [UInt8]
    /// Delivery evidence of every `app` (tests call `flush()` instead of waiting a second).
    let deliveries: DeliveryRecorder
    /// Player identity, when a test configures it.
    var players: PlayerTokens? = nil

    static func make(
        uploadLimit: Int64 = 64 * 1024 * 1024, tokenTTL: TimeInterval = 600, trustedProxies: Set<String> = [], checkpointEvery: Int64 = 1000,
        configure: (inout CofferConfiguration) -> Void = { _ in }
    ) async throws -> Harness {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("coffer-server-\(UUID().uuidString)")
        var configuration = CofferConfiguration()
        configuration.dataDirectory = directory.path
        configuration.port = 0
        configuration.anchors = [try ca.anchor()]
        configuration.bundleIds = [bundle]
        configuration.uploadLimit = uploadLimit
        configuration.tokenTTL = tokenTTL
        configuration.trustedProxies = trustedProxies
        configuration.checkpointEvery = checkpointEvery
        configure(&configuration)
        var logger = Logger(label: "coffer-test")
        logger.logLevel = .warning
        let services = try await SQLiteStorage.open(configuration, logger: logger)
        let admin = try await APIKeys.create(role: .admin, name: "test admin", in: services.keys, signer: services.ledgerSigner, now: Date())
        let auditor = try await APIKeys.create(role: .auditor, name: "test auditor", in: services.keys, signer: services.ledgerSigner, now: Date())
        let level = Array(##"{"level":1,"map":["#S..E#"]}"##.utf8)
        let harness = Harness(
            directory: directory, services: services, runtime: ServerRuntime(configuration), adminKey: admin, auditorKey: auditor, levelBytes: level,
            deliveries: DeliveryRecorder(repository: services.deliveryRepository, logger: logger))
        try await harness.store(assetId: "level-1", bytes: level, contentType: "application/json")
        try await harness.store(assetId: "tiles", bytes: Array("# wall\n. floor\n".utf8), contentType: "text/plain")
        try await services.catalogue.putLoggedProduct(
            Product(
                productId: product, bundleId: bundle, type: .nonConsumable, assetIds: ["level-1", "tiles"], title: "Level Pack 1", updatedAt: Date()))
        try await services.catalogue.putLoggedProduct(
            Product(
                productId: "com.coffer.demo.levelpack2", bundleId: bundle, type: .nonConsumable, assetIds: ["tiles"], title: "Level Pack 2",
                updatedAt: Date()))
        return harness
    }

    /// The admin log's entries of the catalogue ``make(uploadLimit:tokenTTL:trustedProxies:checkpointEvery:configure:)``
    /// stores (the ledger's entries 1–4), as an admin's uploads and puts are logged.
    static let catalogueActions = ["asset.upload", "asset.upload", "product.put", "product.put"]

    func store(assetId: String, bytes: [UInt8], contentType: String) async throws {
        let stored = try await services.content.write(
            AsyncStream {
                $0.yield(bytes); $0.finish()
            }, maxBytes: Int64.max, expectedSHA256: nil)
        _ = try await services.catalogue.addLoggedAssetVersion(
            assetId: assetId, name: assetId, contentType: contentType, size: stored.size, sha256: stored.sha256, at: Date())
    }

    var app: some ApplicationProtocol {
        var logger = Logger(label: "coffer-test")
        logger.logLevel = .warning
        return application(logger: logger)
    }

    /// `configuration`: the server's settings in place of the harness's (a download mode).
    func application(logger: Logger, runtime: ServerRuntime? = nil, configuration: CofferConfiguration? = nil) -> some ApplicationProtocol {
        var dependencies = services.dependencies
        dependencies.deliveries = deliveries
        dependencies.players = players
        return buildApplication(
            configuration ?? services.configuration, dependencies: dependencies, runtime: runtime ?? self.runtime, logger: logger)
    }

    /// A vault over the harness's storage, configured like the server's.
    var vault: Vault {
        let c = services.configuration
        return Vault(
            verifier: AppStoreVerifier(configuration: VerifierConfiguration(anchors: c.anchors, bundleIds: c.bundleIds, appAppleId: c.appAppleId)),
            catalogue: services.catalogue, ledger: services.ledger, tokens: services.tokens, tokenTTL: c.tokenTTL)
    }

    func cleanUp() { try? FileManager.default.removeItem(at: directory) }

    static func receipt(_ transactionId: String = "1000", product: String = Harness.product, bundle: String = Harness.bundle, cancelled: Bool = false)
        throws -> String
    {
        var purchase = PurchaseSpec(productId: product, transactionId: transactionId)
        if cancelled { purchase.cancellationDate = Date() }
        return Data(try ca.mintReceipt(ReceiptSpec(bundleId: bundle, purchases: [purchase]), now: Date())).base64EncodedString()
    }

    static func body(_ object: [String: Any]) throws -> ByteBuffer {
        ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: object))
    }

    static func json(_ response: TestResponse) throws -> [String: Any] {
        let data = Data(response.body.readableBytesView)
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any], "\(String(decoding: data, as: UTF8.self))")
    }

    static func code(_ response: TestResponse) -> String? {
        (try? JSONSerialization.jsonObject(with: Data(response.body.readableBytesView)) as? [String: Any])?["code"] as? String
    }

    static let jsonHeaders: HTTPFields = [.contentType: "application/json"]

    func bearer(_ key: String) -> HTTPFields { [.authorization: "Bearer \(key)"] }
}

extension Array where Element == UInt8 {
    var sha256Hex: String { SHA256.hash(data: self).hexString }
}
