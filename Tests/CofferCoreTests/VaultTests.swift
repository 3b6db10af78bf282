import CofferCore
import CofferSandbox
import CofferTestSupport
import Crypto
import Foundation
import Testing

/// The vault's rules over the in-memory doubles and the sandbox CA: every refusal has its
/// kind and code, and every refusal that reached the ledger is an attempt there.
@Suite struct VaultTests {
    static let bundle = "com.coffer.demo"
    static let pack = "com.coffer.demo.pack"
    static let gems = "com.coffer.demo.gems"
    static let tokens = TokenSigner(active: TokenKey(id: "k1", key: SymmetricKey(data: [UInt8](repeating: 1, count: 32))))

    /// A vault over fresh doubles: a non-consumable pack (two assets, one not uploaded) and
    /// consumable gems; a product of another bundle.
    struct World {
        let vault: Vault
        let catalogue: InMemoryCatalogue
        let ledger: InMemoryLedger
        let assets: [Asset]

        init(bundleIds: Set<String>? = [VaultTests.bundle]) async throws {
            catalogue = InMemoryCatalogue()
            ledger = InMemoryLedger(signer: LedgerSigner(privateKey: .init()), checkpointEvery: 2)
            var stored: [Asset] = []
            for name in ["level-1", "tiles"] {
                stored.append(
                    try await catalogue.addAssetVersion(
                        assetId: name, name: name + ".bin", contentType: "application/octet-stream", size: 3, sha256: fakeHash(name), at: testNow))
            }
            assets = stored
            for (id, type, bundle, assetIds) in [
                (VaultTests.pack, ProductType.nonConsumable, VaultTests.bundle, ["level-1", "tiles", "not-uploaded"]),
                (VaultTests.gems, .consumable, VaultTests.bundle, ["tiles"]), ("com.other.pack", .nonConsumable, "com.other.app", ["tiles"]),
            ] {
                try await catalogue.putProduct(
                    Product(productId: id, bundleId: bundle, type: type, assetIds: assetIds, title: id, updatedAt: testNow))
            }
            vault = Vault(
                verifier: try sandboxVerifier(bundleIds: bundleIds), catalogue: catalogue, ledger: ledger, tokens: VaultTests.tokens, tokenTTL: 300)
        }

        /// The attempts the ledger recorded, as code and transaction id.
        func attempts() async -> [String] { await ledger.attempts(AuditFilter()).map { "\($0.code) \($0.transactionId ?? "-")" } }
    }

    static func receipt(_ transactionId: String, product: String = pack, bundle: String = bundle, original: String? = nil) throws -> RedemptionRequest
    {
        var purchase = PurchaseSpec(productId: product, transactionId: transactionId)
        purchase.originalTransactionId = original
        let bytes = try sharedCA.mintReceipt(ReceiptSpec(bundleId: bundle, purchases: [purchase]), now: testNow)
        return RedemptionRequest(proof: .receipt(bytes), clientAddress: "192.0.2.9")
    }

    static func transaction(_ transactionId: String, product: String = gems, type: String = "Consumable", original: String? = nil) throws
        -> RedemptionRequest
    {
        var spec = TransactionSpec(bundleId: bundle, productId: product, transactionId: transactionId)
        spec.type = type
        spec.originalTransactionId = original
        return RedemptionRequest(proof: .signedTransaction(try sharedCA.mintTransaction(spec, now: testNow)), clientAddress: "192.0.2.9")
    }

    /// The failure `body` threw, nil when it returned (an error of another type is an issue).
    static func failure<T>(_ body: () async throws -> T) async -> VaultFailure? {
        do {
            _ = try await body()
            return nil
        } catch let failure as VaultFailure {
            return failure
        } catch {
            Issue.record("not a VaultFailure: \(error)")
            return nil
        }
    }

    static func expect(_ failure: VaultFailure?, _ status: Int, _ code: ProblemCode, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(
            failure?.status == status && failure?.code == code,
            "expected \(status) \(code.rawValue), got \(failure.map { "\($0.status) \($0)" } ?? "success")", sourceLocation: sourceLocation)
    }

    @Test func redeemIssuesATokenPerUploadedAssetAndRecordsTheRedemption() async throws {
        let world = try await World()
        let outcome = try await world.vault.redeem(try Self.receipt("1000"), now: testNow)
        let redemption = outcome.redemption
        #expect(redemption.transactionId == "1000" && redemption.productId == Self.pack && redemption.bundleId == Self.bundle)
        #expect(redemption.environment == "LocalTesting" && redemption.sourceFormat == .appReceipt && redemption.sequence == 1)
        #expect(redemption.replayKey == "1000", "a non-consumable without an original id is keyed by its transaction")
        let grant = try #require(outcome.grant)
        #expect(redemption.grantHash == Vault.grantHash(grant))
        #expect(outcome.assets.map(\.asset) == world.assets, "the asset not uploaded is skipped")
        for issued in outcome.assets {
            let claims = try Self.tokens.verify(issued.token, now: testNow)
            #expect(
                claims
                    == DownloadClaims(
                        assetId: issued.asset.assetId, sha256: issued.asset.sha256, redemptionId: redemption.redemptionId,
                        expiresAt: Int64(testNow.timeIntervalSince1970) + 300))
            #expect(issued.expiresAt == testNow.addingTimeInterval(300))
        }
        #expect(await world.ledger.redemptions(AuditFilter()) == [redemption])
        #expect(await world.ledger.chainedEntries(after: 0, limit: 10).map(\.entry.kind) == [.redemption])
        #expect(await world.attempts().isEmpty)
    }

    @Test func aReplayIsAConflictAndItsAttemptIsRecorded() async throws {
        let world = try await World()
        let request = try Self.receipt("1001")
        _ = try await world.vault.redeem(request, now: testNow)
        Self.expect(await Self.failure { try await world.vault.redeem(request, now: testNow) }, 409, .alreadyRedeemed)
        let attempts = await world.ledger.attempts(AuditFilter())
        #expect(attempts.map(\.code) == ["alreadyRedeemed"])
        #expect(attempts.first?.claimed == false && attempts.first?.transactionId == "1001" && attempts.first?.productId == Self.pack)
        // A restore of the non-consumable (a new transaction of the same original) is the same purchase.
        Self.expect(
            await Self.failure { try await world.vault.redeem(try Self.receipt("1002", original: "1001"), now: testNow) }, 409,
            .alreadyRedeemed)
        // Consumables are keyed by transaction: two of one original are two purchases.
        _ = try await world.vault.redeem(try Self.transaction("2001", original: "2000"), now: testNow)
        _ = try await world.vault.redeem(try Self.transaction("2002", original: "2000"), now: testNow)
        #expect(await world.ledger.redemptions(AuditFilter()).map(\.transactionId) == ["1001", "2001", "2002"])
    }

    @Test func unknownProductsWrongBundlesAndWrongTypesAreRefusedAndRecorded() async throws {
        let world = try await World()
        Self.expect(
            await Self.failure { try await world.vault.redeem(try Self.receipt("3001", product: "com.coffer.demo.nothing"), now: testNow) },
            404,
            .unknownProduct)
        Self.expect(
            await Self.failure { try await world.vault.redeem(try Self.receipt("3002", product: "com.other.pack"), now: testNow) }, 422,
            .bundleMismatch)
        Self.expect(
            await Self.failure { try await world.vault.redeem(try Self.receipt("3003", bundle: "com.stranger.app"), now: testNow) }, 422,
            .bundleMismatch)
        Self.expect(
            await Self.failure { try await world.vault.redeem(try Self.transaction("3004", product: Self.pack, type: "Consumable"), now: testNow) },
            422, .productTypeMismatch)
        #expect(
            await world.attempts() == [
                "unknownProduct 3001", "bundleMismatch 3002", "bundleMismatch -", "productTypeMismatch 3004",
            ])
        // The stranger's receipt did not verify: nothing in it is a fact.
        #expect(await world.ledger.attempts(AuditFilter()).map(\.claimed) == [false, false, true, false])
        #expect(await world.ledger.redemptions(AuditFilter()).isEmpty)
    }

    @Test func malformedRequestsAreRefusedBeforeAnythingIsWritten() async throws {
        let world = try await World()
        var request = try Self.receipt("4001")
        request.appAccountToken = "not-a-uuid"
        Self.expect(await Self.failure { try await world.vault.redeem(request, now: testNow) }, 400, .malformedRequest)
        request = try Self.receipt("4001")
        request.transactionId = "4001\n"
        Self.expect(await Self.failure { try await world.vault.redeem(request, now: testNow) }, 400, .malformedRequest)
        let garbage = RedemptionRequest(proof: .receipt([0x30, 0x03, 0x02, 0x01]), clientAddress: "192.0.2.9")
        Self.expect(await Self.failure { try await world.vault.redeem(garbage, now: testNow) }, 400, .malformed)
        #expect(await world.attempts() == ["malformed -"], "only the proof that reached verification is an attempt")
        #expect(await world.ledger.chainedEntries(after: 0, limit: 10).count == 1)
    }

    @Test func aGrantExchangesForFreshTokensUntilTheRedemptionIsRevoked() async throws {
        let world = try await World()
        let redeemed = try await world.vault.redeem(try Self.receipt("5001"), now: testNow)
        let grant = try #require(redeemed.grant)
        let later = testNow.addingTimeInterval(60)
        let exchanged = try await world.vault.exchange(grant: grant, now: later)
        #expect(exchanged.grant == nil && exchanged.redemption == redeemed.redemption)
        #expect(exchanged.assets.map(\.asset) == world.assets)
        #expect(exchanged.assets.allSatisfy { $0.expiresAt == later.addingTimeInterval(300) })
        Self.expect(await Self.failure { try await world.vault.exchange(grant: grant + "x", now: later) }, 403, .grantInvalid)
        Self.expect(
            await Self.failure { try await world.vault.exchange(grant: String(repeating: "g", count: 129), now: later) }, 403, .grantInvalid)

        let revocation = try await world.vault.revoke(transactionId: "5001", reason: "chargeback\n", by: "ops", now: later)
        #expect(revocation.redemptionId == redeemed.redemption.redemptionId && revocation.source == .admin)
        #expect(revocation.environment == "LocalTesting" && revocation.replayKey == "5001" && revocation.reason == #"chargeback\u{A}"#)
        Self.expect(await Self.failure { try await world.vault.exchange(grant: grant, now: later) }, 403, .grantInvalid)
        Self.expect(
            await Self.failure { try await world.vault.revoke(transactionId: "5001", reason: "again", by: "ops", now: later) }, 409,
            .alreadyRevoked)
        Self.expect(
            await Self.failure { try await world.vault.revoke(transactionId: "5999", reason: "none", by: "ops", now: later) }, 404,
            .notRedeemed)
        Self.expect(
            await Self.failure { try await world.vault.revoke(transactionId: "", reason: "none", by: "ops", now: later) }, 400,
            .malformedRequest)
        #expect(await world.ledger.revocations(after: 0, limit: 10) == [revocation])
    }

    @Test func refundNotificationsRevokeRedeemedPurchasesAndRefuseLaterRedemptions() async throws {
        let world = try await World()
        func notification(_ type: String, _ transactionId: String) throws -> String {
            var spec = TransactionSpec(bundleId: Self.bundle, productId: Self.gems, transactionId: transactionId)
            spec.type = "Consumable"
            return try sharedCA.mintNotification(type: type, transaction: spec, now: testNow)
        }
        let redeemed = try await world.vault.redeem(try Self.transaction("6001"), now: testNow)
        #expect(try await world.vault.handleNotification(try notification("REFUND", "6001"), now: testNow) == .revoked)
        #expect(try await world.vault.handleNotification(try notification("REFUND", "6001"), now: testNow) == .alreadyRevoked)
        #expect(await world.ledger.revocation(of: redeemed.redemption)?.source == .notification)
        #expect(try await world.vault.handleNotification(try notification("CONSUMPTION_REQUEST", "6001"), now: testNow) == .ignored)

        // Refunded before it was redeemed: kept, and the redemption is then refused (410).
        #expect(try await world.vault.handleNotification(try notification("REVOKE", "6002"), now: testNow) == .notRedeemed)
        Self.expect(await Self.failure { try await world.vault.redeem(try Self.transaction("6002"), now: testNow) }, 410, .revoked)
        #expect(await world.attempts() == ["revoked 6002"])
        #expect(await world.ledger.redemptions(AuditFilter()).map(\.transactionId) == ["6001"])

        Self.expect(await Self.failure { try await world.vault.handleNotification("not.a.jws", now: testNow) }, 400, .malformed)
        Self.expect(
            await Self.failure {
                try await world.vault.handleNotification(
                    try sharedCA.mintTransaction(TransactionSpec(bundleId: Self.bundle, productId: Self.gems, transactionId: "6003"), now: testNow),
                    now: testNow)
            },
            422, .unsupportedFormat)
    }

    @Test func aStorageFailureIsUnavailableAndRecordsNothing() async throws {
        struct Down: Error {}
        /// A catalogue whose database does not answer.
        struct DownCatalogue: CatalogueRepository {
            func putProduct(_ product: Product, logging: AdminAction?) async throws { throw Down() }
            func product(_ productId: String) async throws -> Product? { throw Down() }
            func products() async throws -> [Product] { throw Down() }
            func deleteProduct(_ productId: String, logging: AdminAction?) async throws -> Bool { throw Down() }
            func addAssetVersion(
                assetId: String, name: String, contentType: String, size: Int64, sha256: String, at: Date, logging: AssetLogging?
            ) async throws -> Asset {
                throw Down()
            }
            func asset(_ assetId: String) async throws -> Asset? { throw Down() }
            func assets() async throws -> [Asset] { throw Down() }
            func versions(of assetId: String) async throws -> [Asset] { throw Down() }
            func referencedDigests() async throws -> Set<String> { throw Down() }
        }
        let ledger = InMemoryLedger()
        let vault = Vault(verifier: try sandboxVerifier(), catalogue: DownCatalogue(), ledger: ledger, tokens: Self.tokens)
        Self.expect(await Self.failure { try await vault.redeem(try Self.receipt("7001"), now: testNow) }, 503, .storageUnavailable)
        #expect(await ledger.attempts(AuditFilter()).isEmpty, "not the client's fault: no attempt")
    }
}
