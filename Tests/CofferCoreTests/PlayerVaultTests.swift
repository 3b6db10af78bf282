import CofferCore
import CofferSandbox
import CofferTestSupport
import Crypto
import Foundation
import Testing

/// Players, restore, subscriptions and the refund lifecycle: the vault's rules over the
/// in-memory ledger and the sandbox CA. Every outcome is a chained event: each test ends with
/// the ledger's export verifying.
@Suite struct PlayerVaultTests {
    static let bundle = "com.coffer.demo"
    static let pack = "com.coffer.demo.pack"
    static let season = "com.coffer.demo.season"
    static let month = "com.coffer.demo.month"
    static let shared = "com.coffer.demo.shared"
    static let premium = "com.coffer.demo.season.premium"
    static let alice = Player(id: "a1e5c0de-0000-4000-8000-000000000001", accountToken: "a1e5c0de-0000-4000-8000-000000000001")
    static let bob = Player(id: "b0b0b0b0-0000-4000-8000-000000000002", accountToken: "b0b0b0b0-0000-4000-8000-000000000002")
    static let hour: TimeInterval = 3600

    struct World {
        let vault: Vault
        let ledger: InMemoryLedger
        let signer = LedgerSigner(privateKey: .init())

        init(refundPolicy: RefundPolicy = .revokeAny, legacyReceipts: LegacyReceiptPolicy = .accept) async throws {
            let catalogue = InMemoryCatalogue()
            ledger = InMemoryLedger(signer: signer, checkpointEvery: 3)
            _ = try await catalogue.addAssetVersion(
                assetId: "level", name: "level.bin", contentType: "application/octet-stream", size: 3, sha256: fakeHash("level"), at: testNow)
            for (id, type, duration, family) in [
                (PlayerVaultTests.pack, ProductType.nonConsumable, nil, false), (PlayerVaultTests.season, .autoRenewable, nil, false),
                (PlayerVaultTests.month, .nonRenewing, Int64(30 * 86400), false), (PlayerVaultTests.shared, .nonConsumable, nil, true),
                (PlayerVaultTests.premium, .autoRenewable, nil, false),
            ] as [(String, ProductType, Int64?, Bool)] {
                try await catalogue.putProduct(
                    Product(
                        productId: id, bundleId: PlayerVaultTests.bundle, type: type, assetIds: ["level"], title: id, updatedAt: testNow,
                        familyShareable: family, durationSeconds: duration))
            }
            vault = Vault(
                verifier: try sandboxVerifier(), catalogue: catalogue, ledger: ledger, tokens: VaultTests.tokens, tokenTTL: 600,
                refundPolicy: refundPolicy, legacyReceipts: legacyReceipts)
        }

        func attempts() async -> [String] { await ledger.attempts(AuditFilter()).map { "\($0.code) \($0.transactionId ?? "-")" } }
        func events() async -> [String] { await ledger.purchaseEvents(after: 0, limit: 100).map(\.kind) }

        /// The ledger's export verifies with its key.
        func expectIntact(sourceLocation: SourceLocation = #_sourceLocation) async throws {
            var text = ""
            try await ledger.export(publicKey: signer.publicKey, now: testNow) { text += $0 }
            let report = LedgerExport.verify(Data(text.utf8), publicKey: signer.publicKey)
            #expect(report.intact, "\(String(describing: report.problem))", sourceLocation: sourceLocation)
        }
    }

    static func spec(
        _ transactionId: String, product: String = pack, type: String = "Non-Consumable", original: String? = nil, expires: Date? = nil,
        token: String? = nil
    ) -> TransactionSpec {
        var spec = TransactionSpec(bundleId: bundle, productId: product, transactionId: transactionId)
        spec.type = type
        spec.originalTransactionId = original
        spec.expiresDate = expires
        spec.appAccountToken = token
        return spec
    }

    static func request(_ spec: TransactionSpec, player: Player? = nil) throws -> RedemptionRequest {
        RedemptionRequest(proof: .signedTransaction(try sharedCA.mintTransaction(spec, now: testNow)), clientAddress: "192.0.2.7", player: player)
    }

    static func subscription(_ transactionId: String, original: String = "900", expires: Date) -> TransactionSpec {
        spec(transactionId, product: season, type: "Auto-Renewable Subscription", original: original, expires: expires)
    }

    static func notify(
        _ vault: Vault, _ type: String, subtype: String? = nil, _ spec: TransactionSpec, renewal: RenewalSpec? = nil, uuid: String? = nil,
        now: Date = testNow
    ) async throws -> Vault.NotificationOutcome {
        try await vault.handleNotification(
            try sharedCA.mintNotification(type: type, subtype: subtype, transaction: spec, renewal: renewal, notificationUUID: uuid, now: testNow),
            now: now)
    }

    @Test func theOwnerRestoresOnANewDeviceAndAnotherPlayerIsRefused() async throws {
        let world = try await World()
        let first = try await world.vault.redeem(try Self.request(Self.spec("100"), player: Self.alice), now: testNow)
        #expect(first.redemption.playerId == Self.alice.id && first.grant != nil && !first.restored)
        // The same transaction again, by its owner: fresh tokens, no new redemption or grant.
        let again = try await world.vault.redeem(try Self.request(Self.spec("100"), player: Self.alice), now: testNow.addingTimeInterval(60))
        #expect(again.restored && again.grant == nil && again.redemption.redemptionId == first.redemption.redemptionId)
        #expect(again.assets.count == 1 && again.assets[0].token != first.assets[0].token)
        // A restored non-consumable on a new device: a new transaction id, the same original.
        let restored = try await world.vault.redeem(
            try Self.request(Self.spec("101", original: "100"), player: Self.alice), now: testNow.addingTimeInterval(120))
        #expect(restored.restored && restored.redemption.redemptionId == first.redemption.redemptionId)
        #expect(await world.events() == ["restore"], "one restore event per token lifetime: repeating a restore does not grow the ledger")
        _ = try await world.vault.redeem(try Self.request(Self.spec("100"), player: Self.alice), now: testNow.addingTimeInterval(1000))
        // A look-alike id (canonically equivalent, other bytes) is another player.
        let composed = Player(id: "caf\u{E9}", accountToken: nil)
        let decomposed = Player(id: "cafe\u{301}", accountToken: nil)
        _ = try await world.vault.redeem(try Self.request(Self.spec("102"), player: composed), now: testNow)
        VaultTests.expect(
            await VaultTests.failure { try await world.vault.redeem(try Self.request(Self.spec("102"), player: decomposed), now: testNow) }, 409,
            .alreadyRedeemed)
        // Another player: 409, recorded.
        VaultTests.expect(
            await VaultTests.failure { try await world.vault.redeem(try Self.request(Self.spec("100"), player: Self.bob), now: testNow) }, 409,
            .alreadyRedeemed)
        #expect(await world.attempts() == ["alreadyRedeemed 102", "alreadyRedeemed 100"])
        #expect(await world.events() == ["restore", "restore"])
        #expect(await world.ledger.purchaseEvents(after: 0, limit: 10).allSatisfy { $0.playerId == Self.alice.id })
        // What Alice owns, with fresh URLs and no receipt; Bob owns nothing.
        let owned = try await world.vault.entitlements(of: Self.alice, now: testNow).items
        #expect(owned.map(\.entitlement.redemption.transactionId) == ["100"] && owned[0].entitlement.state == .active && owned[0].assets.count == 1)
        #expect(try await world.vault.entitlements(of: Self.bob, now: testNow).items.isEmpty)
        try await world.expectIntact()
    }

    @Test func withoutPlayersAReplayStaysAConflictAndRestoreIsByGrant() async throws {
        let world = try await World()
        let first = try await world.vault.redeem(try Self.request(Self.spec("110")), now: testNow)
        VaultTests.expect(
            await VaultTests.failure { try await world.vault.redeem(try Self.request(Self.spec("110")), now: testNow) }, 409, .alreadyRedeemed)
        // A purchase redeemed without a player cannot be claimed by one later.
        VaultTests.expect(
            await VaultTests.failure { try await world.vault.redeem(try Self.request(Self.spec("110"), player: Self.alice), now: testNow) }, 409,
            .alreadyRedeemed)
        let exchanged = try await world.vault.exchange(grant: try #require(first.grant), now: testNow)
        #expect(exchanged.assets.count == 1)
        #expect(await world.events().isEmpty)
    }

    @Test func aSignedAppAccountTokenMustBeThePlayersAccount() async throws {
        let world = try await World()
        VaultTests.expect(
            await VaultTests.failure {
                try await world.vault.redeem(try Self.request(Self.spec("120", token: Self.bob.id), player: Self.alice), now: testNow)
            }, 422, .accountMismatch)
        let mine = try await world.vault.redeem(
            try Self.request(Self.spec("121", token: Self.alice.id.uppercased()), player: Self.alice), now: testNow)
        #expect(mine.redemption.appAccountToken == Self.alice.id.uppercased())
        // A player whose account claim is not a UUID matches no signed token; purchases without one are fine.
        let nameOnly = Player(id: "alice@example.com", accountToken: nil)
        VaultTests.expect(
            await VaultTests.failure {
                try await world.vault.redeem(try Self.request(Self.spec("122", token: Self.alice.id), player: nameOnly), now: testNow)
            }, 422, .accountMismatch)
        #expect(try await world.vault.redeem(try Self.request(Self.spec("123"), player: nameOnly), now: testNow).redemption.playerId == nameOnly.id)
        #expect(await world.attempts() == ["accountMismatch 120", "accountMismatch 122"])
    }

    /// A legacy receipt does not carry the appAccountToken StoreKit 2 signs for the same
    /// transaction (nor its ownership type): accepted, Alice's purchase presented as a receipt
    /// binds to Bob; with `--legacy-receipts refuse` it is refused before any signature check,
    /// and recorded, while her signed transaction still redeems.
    @Test func legacyReceiptsCanBeRefusedSoTheSignedAccountAlwaysBinds() async throws {
        func receipt(_ transactionId: String) throws -> RedemptionRequest {
            let spec = ReceiptSpec(bundleId: Self.bundle, purchases: [PurchaseSpec(productId: Self.pack, transactionId: transactionId)])
            return RedemptionRequest(proof: .receipt(try sharedCA.mintReceipt(spec, now: testNow)), clientAddress: "192.0.2.9", player: Self.bob)
        }
        let accepting = try await World()
        // The downgrade `accept` leaves open (documented, warned about at start with players on).
        #expect(try await accepting.vault.redeem(try receipt("130"), now: testNow).redemption.playerId == Self.bob.id)
        VaultTests.expect(
            await VaultTests.failure {
                try await accepting.vault.redeem(try Self.request(Self.spec("130", token: Self.alice.id), player: Self.alice), now: testNow)
            }, 409, .alreadyRedeemed)

        let refusing = try await World(legacyReceipts: .refuse)
        VaultTests.expect(await VaultTests.failure { try await refusing.vault.redeem(try receipt("131"), now: testNow) }, 422, .legacyReceiptRefused)
        let mine = try await refusing.vault.redeem(try Self.request(Self.spec("131", token: Self.alice.id), player: Self.alice), now: testNow)
        #expect(mine.redemption.playerId == Self.alice.id)
        #expect(await refusing.attempts() == ["legacyReceiptRefused -"])
    }

    @Test func aSeasonPassEntitlesWhilePaidRenewalsExtendItAndTokensNeverOutliveIt() async throws {
        let world = try await World()
        let end = testNow.addingTimeInterval(Self.hour)
        let pass = try await world.vault.redeem(try Self.request(Self.subscription("900", expires: end), player: Self.alice), now: testNow)
        #expect(pass.redemption.expiresAt == end && pass.entitlementEndsAt == end)
        // Ten minutes before the end, a token lives ten minutes, not the full TTL.
        let late = try await world.vault.exchange(grant: try #require(pass.grant), now: end.addingTimeInterval(-300))
        #expect(late.assets[0].expiresAt == end)
        // Lapsed: no tokens, no restore.
        VaultTests.expect(
            await VaultTests.failure { try await world.vault.exchange(grant: try #require(pass.grant), now: end.addingTimeInterval(1)) }, 403,
            .entitlementExpired)
        VaultTests.expect(
            await VaultTests.failure {
                try await world.vault.redeem(
                    try Self.request(Self.subscription("900", expires: end), player: Self.alice), now: end.addingTimeInterval(1))
            }, 403, .entitlementExpired)
        // The renewal (a new transaction, the same original) extends it — a 200 restore for its owner.
        let next = end.addingTimeInterval(30 * 86400)
        let renewed = try await world.vault.redeem(
            try Self.request(Self.subscription("901", expires: next), player: Self.alice), now: end.addingTimeInterval(10))
        #expect(renewed.restored && renewed.entitlementEndsAt == next)
        // Another player presenting a later renewal: 409, and the renewal still counts (Apple signed it).
        let later = next.addingTimeInterval(30 * 86400)
        VaultTests.expect(
            await VaultTests.failure {
                try await world.vault.redeem(try Self.request(Self.subscription("902", expires: later), player: Self.bob), now: next)
            },
            409, .alreadyRedeemed)
        let owned = try await world.vault.entitlements(of: Self.alice, now: next.addingTimeInterval(60)).items
        #expect(owned.first?.entitlement.endsAt == later && owned.first?.entitlement.state == .active)
        #expect(await world.events() == ["renewal", "restore", "renewal"])
        #expect(await world.ledger.purchaseEvents(after: 0, limit: 10).allSatisfy { $0.playerId == Self.alice.id }, "the owner, not the presenter")
        try await world.expectIntact()
    }

    @Test func anotherProductOfTheSubscriptionGroupIsAnotherPurchase() async throws {
        let world = try await World()
        let end = testNow.addingTimeInterval(Self.hour)
        let basic = try await world.vault.redeem(
            try Self.request(Self.subscription("980", original: "980", expires: end), player: Self.alice), now: testNow)
        // Upgrading to the premium pass keeps the original transaction id: a new purchase, with its own assets and end.
        let premiumEnd = end.addingTimeInterval(30 * 86400)
        var premium = Self.spec("981", product: Self.premium, type: "Auto-Renewable Subscription", original: "980", expires: premiumEnd)
        premium.purchaseDate = testNow
        let upgraded = try await world.vault.redeem(try Self.request(premium, player: Self.alice), now: testNow)
        #expect(!upgraded.restored && upgraded.grant != nil && upgraded.redemption.redemptionId != basic.redemption.redemptionId)
        #expect(upgraded.redemption.replayKey == "980:\(Self.premium)" && basic.redemption.replayKey == "980:\(Self.season)")
        // Premium renewals do not extend the basic pass.
        #expect(try await Self.notify(world.vault, "DID_RENEW", premium) == .updated)
        let owned = try await world.vault.entitlements(of: Self.alice, now: end.addingTimeInterval(60)).items
        #expect(owned.map(\.entitlement.state) == [.expired, .active])
        #expect(owned.map(\.entitlement.redemption.productId) == [Self.season, Self.premium])
    }

    @Test func aRefundedSubscriptionEntitlesAgainWhenALaterPeriodIsPaid() async throws {
        let world = try await World()
        let end = testNow.addingTimeInterval(Self.hour)
        let pass = try await world.vault.redeem(try Self.request(Self.subscription("990", original: "990", expires: end)), now: testNow)
        var refunded = Self.subscription("990", original: "990", expires: end)
        refunded.revocationDate = testNow
        #expect(try await Self.notify(world.vault, "REFUND", refunded) == .revoked)
        VaultTests.expect(
            await VaultTests.failure { try await world.vault.exchange(grant: try #require(pass.grant), now: testNow) }, 403, .grantInvalid)
        // A late DID_RENEW of the refunded period changes nothing (recorded only)…
        #expect(try await Self.notify(world.vault, "DID_RENEW", refunded, now: testNow.addingTimeInterval(1)) == .recorded)
        VaultTests.expect(
            await VaultTests.failure { try await world.vault.exchange(grant: try #require(pass.grant), now: testNow.addingTimeInterval(2)) }, 403,
            .grantInvalid)
        // …the next paid period does (bought after the refund).
        let next = end.addingTimeInterval(30 * 86400)
        var paid = Self.subscription("991", original: "990", expires: next)
        paid.purchaseDate = end
        #expect(try await Self.notify(world.vault, "DID_RENEW", paid, now: end) == .updated)
        #expect(try await world.vault.exchange(grant: try #require(pass.grant), now: end.addingTimeInterval(1)).entitlementEndsAt == next)
        try await world.expectIntact()
    }

    /// A period bought before the revocation — the one current when the pass was refunded or
    /// revoked, presented or notified later — does not reinstate it: only a period paid after
    /// Apple's refund does, and nothing paid lifts an admin's revocation or a REVOKE.
    @Test func onlyAPeriodPaidAfterARefundReinstatesASubscription() async throws {
        for revokedBy in ["REFUND", "REVOKE", "admin"] {
            let world = try await World()
            let end = testNow.addingTimeInterval(Self.hour)
            let pass = try await world.vault.redeem(
                try Self.request(Self.subscription("970", original: "970", expires: end), player: Self.alice), now: testNow)
            // T5: the period current at the revocation, renewed an hour before it, known so far only to Apple.
            let revokedAt = testNow.addingTimeInterval(600)
            var current = Self.subscription("975", original: "970", expires: end.addingTimeInterval(20 * 86400))
            current.purchaseDate = testNow.addingTimeInterval(-Self.hour)
            if revokedBy == "admin" {
                _ = try await world.vault.revoke(transactionId: "970", reason: "chargeback", by: "ops", now: revokedAt)
            } else {
                var revoked = Self.subscription("970", original: "970", expires: end)
                revoked.revocationDate = revokedAt
                #expect(try await Self.notify(world.vault, revokedBy, revoked, now: revokedAt) == .revoked)
            }
            func refused(_ at: Date, sourceLocation: SourceLocation = #_sourceLocation) async throws {
                VaultTests.expect(
                    await VaultTests.failure { try await world.vault.exchange(grant: try #require(pass.grant), now: at) }, 403, .grantInvalid,
                    sourceLocation: sourceLocation)
            }
            let later = revokedAt.addingTimeInterval(60)
            // Its owner presents T5 (Transaction.latest), then toggles auto-renew so Apple notifies it: neither reinstates.
            VaultTests.expect(
                await VaultTests.failure { try await world.vault.redeem(try Self.request(current, player: Self.alice), now: later) }, 410,
                .revoked)
            #expect(
                try await Self.notify(world.vault, "DID_CHANGE_RENEWAL_STATUS", subtype: "AUTO_RENEW_ENABLED", current, now: later)
                    == .recorded, "\(revokedBy)")
            try await refused(later.addingTimeInterval(1))
            // Presenting it again adds nothing to the ledger.
            let recorded = await world.events()
            _ = await VaultTests.failure { try await world.vault.redeem(try Self.request(current, player: Self.alice), now: later) }
            #expect(await world.events() == recorded)
            #expect(recorded.filter { $0 == "recordedOnly" }.count == 2, "\(revokedBy): \(recorded)")
            // A period bought after the revocation: reinstates after Apple's refund only.
            var paid = Self.subscription("976", original: "970", expires: end.addingTimeInterval(40 * 86400))
            paid.purchaseDate = later
            let outcome = try await Self.notify(world.vault, "DID_RENEW", paid, now: later)
            if revokedBy == "REFUND" {
                #expect(outcome == .updated)
                #expect(try await world.vault.exchange(grant: try #require(pass.grant), now: later).entitlementEndsAt == paid.expiresDate)
            } else {
                #expect(outcome == .recorded, "\(revokedBy)")
                try await refused(later)
            }
            try await world.expectIntact()
        }
    }

    /// An admin's revocation is never lifted by a payment, whatever Apple refunds come before
    /// or after it: a REFUND after the admin's ban (the last revocation then an Apple one), or
    /// an admin's ban while only Apple's refund held (it was answered 409 and dropped), and a
    /// period bought after both reinstated the pass.
    @Test func anAdminsRevocationStaysWhateverRefundsComeBeforeOrAfterIt() async throws {
        for adminFirst in [true, false] {
            let world = try await World()
            let end = testNow.addingTimeInterval(Self.hour)
            let pass = try await world.vault.redeem(
                try Self.request(Self.subscription("920", original: "920", expires: end), player: Self.alice), now: testNow)
            let at = testNow.addingTimeInterval(60)
            var refunded = Self.subscription("920", original: "920", expires: end)
            refunded.revocationDate = at
            if adminFirst {
                _ = try await world.vault.revoke(transactionId: "920", reason: "ban", by: "ops", now: at)
                #expect(try await Self.notify(world.vault, "REFUND", refunded, uuid: "refund-920", now: at) == .alreadyRevoked)
            } else {
                #expect(try await Self.notify(world.vault, "REFUND", refunded, uuid: "refund-920", now: at) == .revoked)
                let banned = try await world.vault.revoke(transactionId: "920", reason: "ban", by: "ops", now: at.addingTimeInterval(1))
                #expect(banned.source == .admin, "recorded, not 409")
            }
            #expect(await world.events() == ["revokedAgain"], "adminFirst \(adminFirst)")
            // A new period, bought after both: recorded only, and the pass stays revoked.
            let later = at.addingTimeInterval(120)
            var paid = Self.subscription("921", original: "920", expires: end.addingTimeInterval(30 * 86400))
            paid.purchaseDate = later
            #expect(try await Self.notify(world.vault, "DID_RENEW", paid, now: later) == .recorded, "adminFirst \(adminFirst)")
            VaultTests.expect(
                await VaultTests.failure { try await world.vault.exchange(grant: try #require(pass.grant), now: later) }, 403, .grantInvalid)
            // Nor does a reversal of the refund.
            #expect(try await Self.notify(world.vault, "REFUND_REVERSED", refunded, now: later) == .recorded)
            VaultTests.expect(
                await VaultTests.failure { try await world.vault.exchange(grant: try #require(pass.grant), now: later) }, 403, .grantInvalid)
            try await world.expectIntact()
        }
    }

    /// The fold itself (events written before the vault recorded unpaid periods as
    /// `recordedOnly`): a period paid after the revocation lifts Apple's refund only.
    @Test func theFoldLiftsOnlyAnAppleRefundForAPeriodPaidAfterIt() {
        var pass = makeRedemption("930", original: "930")
        pass.expiresAt = testNow.addingTimeInterval(Self.hour)
        let renewal = PurchaseEvent(
            sequence: 1, at: testNow.addingTimeInterval(120), kind: .renewal, environment: "Sandbox", replayKey: "930", redemptionId: "r-930",
            transactionId: "931", expiresAt: testNow.addingTimeInterval(30 * 86400), detail: "renewal", source: .client, reference: "r-930")
        let now = testNow.addingTimeInterval(300)
        for (reason, source, state) in [
            ("REFUND", Revocation.Source.notification, Entitlement.State.active), ("REVOKE/FAMILY_REVOKE", .notification, .revoked),
            ("chargeback", .admin, .revoked), ("REFUND", .admin, .revoked),
        ] {
            let revocation = Revocation(
                redemptionId: "r-930", transactionId: "930", revokedAt: testNow, reason: reason, source: source, reference: "x", recordedAt: testNow)
            #expect(Entitlement.fold(pass, revocation: revocation, events: [renewal], now: now).state == state, "\(reason) by \(source)")
        }
        // An admin's revocation, then Apple's refund again: the last is a refund, the admin's still holds.
        let admin = Revocation(
            redemptionId: "r-930", transactionId: "930", revokedAt: testNow, reason: "ban", source: .admin, reference: "ops", recordedAt: testNow)
        let refund = PurchaseEvent(
            sequence: 1, at: testNow.addingTimeInterval(60), kind: .revokedAgain, environment: "Sandbox", replayKey: "930", redemptionId: "r-930",
            transactionId: "930", detail: "REFUND", source: .notification, reference: "n-1")
        var paid = renewal
        paid.sequence = 2
        #expect(Entitlement.fold(pass, revocation: admin, events: [refund, paid], now: now).state == .revoked)
    }

    /// The first redemption of a subscription period the ledger already knows renewed (a
    /// DID_RENEW notified before it) gets tokens and an end from the renewal, not its own
    /// past end.
    @Test func aFirstRedemptionAfterARenewalEndsWithTheRenewal() async throws {
        let world = try await World()
        let end = testNow.addingTimeInterval(-60)
        let renewed = testNow.addingTimeInterval(Self.hour)
        #expect(
            try await Self.notify(world.vault, "DID_RENEW", Self.subscription("960", original: "960", expires: renewed), uuid: "n-960")
                == .updated)
        let pass = try await world.vault.redeem(try Self.request(Self.subscription("960", original: "960", expires: end)), now: testNow)
        #expect(pass.entitlementEndsAt == renewed)
        #expect(pass.assets.allSatisfy { $0.expiresAt > testNow }, "\(pass.assets.map(\.expiresAt))")
    }

    @Test func anAdminRevokesAReinstatedPurchaseAndARetriedRefundIsNotARevocation() async throws {
        let world = try await World()
        let bought = try await world.vault.redeem(try Self.request(Self.spec("995")), now: testNow)
        let refund = try sharedCA.mintNotification(type: "REFUND", transaction: Self.spec("995"), notificationUUID: "refund-995", now: testNow)
        #expect(try await world.vault.handleNotification(refund, now: testNow) == .revoked)
        #expect(try await Self.notify(world.vault, "REFUND_REVERSED", Self.spec("995")) == .reinstated)
        // Apple retrying the refund it reversed is not a new refund.
        #expect(try await world.vault.handleNotification(refund, now: testNow) == .alreadyRevoked)
        #expect(try await world.vault.exchange(grant: try #require(bought.grant), now: testNow).assets.count == 1)
        let revoked = try await world.vault.revoke(transactionId: "995", reason: "chargeback", by: "ops", now: testNow)
        #expect(revoked.source == .admin && revoked.reason == "chargeback")
        VaultTests.expect(
            await VaultTests.failure { try await world.vault.exchange(grant: try #require(bought.grant), now: testNow) }, 403, .grantInvalid)
        VaultTests.expect(
            await VaultTests.failure { try await world.vault.revoke(transactionId: "995", reason: "again", by: "ops", now: testNow) }, 409,
            .alreadyRevoked)
        #expect(await world.events() == ["refundReversed", "revokedAgain"])
        #expect(await world.ledger.purchaseEvents(after: 0, limit: 10).last?.source == .admin)
        // A notification without a UUID cannot be told from its retries: refused.
        var object = try #require(
            try JSONSerialization.jsonObject(with: Data(Base64.decodeURL(refund.split(separator: ".")[1]) ?? [])) as? [String: Any])
        object["notificationUUID"] = nil
        let anonymous = try sharedCA.signJWS(payload: Array(try JSONSerialization.data(withJSONObject: object)))
        VaultTests.expect(await VaultTests.failure { try await world.vault.handleNotification(anonymous, now: testNow) }, 422, .malformed)
        try await world.expectIntact()
    }

    @Test func upgradedTransactionsDoNotGrantAndNonRenewingPassesLastTheirDuration() async throws {
        let world = try await World()
        var upgraded = Self.subscription("910", original: "910", expires: testNow.addingTimeInterval(Self.hour))
        upgraded.isUpgraded = true
        VaultTests.expect(
            await VaultTests.failure { try await world.vault.redeem(try Self.request(upgraded), now: testNow) }, 409, .upgradedTransaction)
        var month = Self.spec("920", product: Self.month, type: "Non-Renewing Subscription")
        month.purchaseDate = testNow
        let bought = try await world.vault.redeem(try Self.request(month), now: testNow)
        #expect(bought.entitlementEndsAt == testNow.addingTimeInterval(30 * 86400))
        VaultTests.expect(
            await VaultTests.failure {
                try await world.vault.exchange(grant: try #require(bought.grant), now: testNow.addingTimeInterval(31 * 86400))
            },
            403, .entitlementExpired)
        // A subscription transaction for a non-consumable product is not it.
        VaultTests.expect(
            await VaultTests.failure {
                try await world.vault.redeem(
                    try Self.request(Self.spec("930", type: "Auto-Renewable Subscription", expires: testNow.addingTimeInterval(60))), now: testNow)
            }, 422, .productTypeMismatch)
    }

    @Test func subscriptionNotificationsMoveTheEntitlement() async throws {
        let world = try await World()
        let end = testNow.addingTimeInterval(Self.hour)
        let pass = try await world.vault.redeem(try Self.request(Self.subscription("940", original: "940", expires: end)), now: testNow)
        let grant = try #require(pass.grant)
        // SUBSCRIBED and DID_CHANGE_RENEWAL_STATUS are recorded; DID_RENEW extends.
        #expect(
            try await Self.notify(world.vault, "SUBSCRIBED", subtype: "INITIAL_BUY", Self.subscription("940", original: "940", expires: end))
                == .updated)
        #expect(
            try await Self.notify(
                world.vault, "DID_CHANGE_RENEWAL_STATUS", subtype: "AUTO_RENEW_DISABLED", Self.subscription("940", original: "940", expires: end))
                == .updated)
        let renewedEnd = end.addingTimeInterval(Self.hour)
        #expect(
            try await Self.notify(world.vault, "DID_RENEW", Self.subscription("941", original: "940", expires: renewedEnd), uuid: "n-renew")
                == .updated)
        #expect(
            try await Self.notify(world.vault, "DID_RENEW", Self.subscription("941", original: "940", expires: renewedEnd), uuid: "n-renew")
                == .duplicate)
        #expect(try await world.vault.exchange(grant: grant, now: end.addingTimeInterval(60)).entitlementEndsAt == renewedEnd)
        // Billing fails: a grace period keeps it entitled past its end…
        var renewal = RenewalSpec(productId: Self.season, originalTransactionId: "940")
        renewal.gracePeriodExpiresDate = renewedEnd.addingTimeInterval(6 * 86400)
        renewal.isInBillingRetryPeriod = true
        #expect(
            try await Self.notify(
                world.vault, "DID_FAIL_TO_RENEW", subtype: "GRACE_PERIOD", Self.subscription("941", original: "940", expires: renewedEnd),
                renewal: renewal) == .updated)
        let inGrace = try await world.vault.exchange(grant: grant, now: renewedEnd.addingTimeInterval(86400))
        #expect(inGrace.entitlementEndsAt == renewal.gracePeriodExpiresDate)
        // …until GRACE_PERIOD_EXPIRED ends it (at its signing time).
        #expect(
            try await Self.notify(world.vault, "GRACE_PERIOD_EXPIRED", Self.subscription("941", original: "940", expires: renewedEnd))
                == .updated)
        VaultTests.expect(
            await VaultTests.failure { try await world.vault.exchange(grant: grant, now: renewedEnd.addingTimeInterval(86400)) }, 403,
            .entitlementExpired)
        #expect(
            try await Self.notify(world.vault, "EXPIRED", subtype: "BILLING_RETRY", Self.subscription("941", original: "940", expires: renewedEnd))
                == .updated)
        let events = await world.ledger.purchaseEvents(after: 0, limit: 100)
        let reasons: [String] = events.map { event in String(event.detail.prefix { $0 != " " }) }
        let expected = [
            "SUBSCRIBED/INITIAL_BUY", "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED", "DID_RENEW", "DID_FAIL_TO_RENEW/GRACE_PERIOD",
            "GRACE_PERIOD_EXPIRED", "EXPIRED/BILLING_RETRY",
        ]
        #expect(reasons == expected)
        #expect(events.allSatisfy { $0.redemptionId == pass.redemption.redemptionId && $0.source == .notification })
        // A subscription notification about a product not sold as a subscription changes nothing.
        #expect(try await Self.notify(world.vault, "DID_RENEW", Self.spec("949", expires: renewedEnd)) == .ignored)
        #expect(await world.ledger.purchaseEvents(after: 0, limit: 100).count == events.count)
        try await world.expectIntact()
    }

    @Test func refundsReversalsAndDeclinesFollowTheLifecycle() async throws {
        let world = try await World()
        let bought = try await world.vault.redeem(try Self.request(Self.spec("950")), now: testNow)
        let grant = try #require(bought.grant)
        #expect(try await Self.notify(world.vault, "REFUND_DECLINED", Self.spec("950")) == .recorded)
        #expect(try await Self.notify(world.vault, "REFUND_REVERSED", Self.spec("950")) == .recorded, "nothing to reverse yet")
        #expect(try await Self.notify(world.vault, "REFUND", Self.spec("950")) == .revoked)
        VaultTests.expect(await VaultTests.failure { try await world.vault.exchange(grant: grant, now: testNow) }, 403, .grantInvalid)
        #expect(try await Self.notify(world.vault, "REFUND_REVERSED", Self.spec("950")) == .reinstated)
        #expect(try await world.vault.exchange(grant: grant, now: testNow).assets.count == 1)
        // Refunded again after the reversal: revoked again.
        #expect(try await Self.notify(world.vault, "REFUND", Self.spec("950")) == .revoked)
        VaultTests.expect(await VaultTests.failure { try await world.vault.exchange(grant: grant, now: testNow) }, 403, .grantInvalid)
        // A further refund while revoked is counted: a reversal retried after it (an older
        // one, delivered late) does not lift it.
        #expect(try await Self.notify(world.vault, "REFUND", Self.spec("950")) == .alreadyRevoked)
        #expect(try await Self.notify(world.vault, "REFUND_REVERSED", Self.spec("950")) == .recorded, "counted: three refunds to two reversals")
        VaultTests.expect(await VaultTests.failure { try await world.vault.exchange(grant: grant, now: testNow) }, 403, .grantInvalid)
        #expect(try await Self.notify(world.vault, "REFUND_REVERSED", Self.spec("950")) == .reinstated)
        #expect(try await world.vault.exchange(grant: grant, now: testNow).assets.count == 1)
        #expect(
            await world.events() == [
                "refundDeclined", "recordedOnly", "refundReversed", "revokedAgain", "revokedAgain", "refundReversed", "refundReversed",
            ])
        try await world.expectIntact()
    }

    /// Refunded before it was redeemed, then the refund reversed by Apple: the player can
    /// redeem it (before, the kept revocation refused it for good). Every later refund counts,
    /// also one that arrives while it is revoked: a reversal then (Apple retrying an older one)
    /// does not lift it. Apple retrying the first refund changes nothing; a REVOKE is not
    /// reversed; a reversal of nothing does not lift a later refund.
    @Test func aRefundReversedBeforeTheRedemptionLetsThePlayerRedeem() async throws {
        let world = try await World()
        func redeemRefused(_ id: String, sourceLocation: SourceLocation = #_sourceLocation) async {
            VaultTests.expect(
                await VaultTests.failure { try await world.vault.redeem(try Self.request(Self.spec(id)), now: testNow) }, 410, .revoked,
                sourceLocation: sourceLocation)
        }
        #expect(try await Self.notify(world.vault, "REFUND", Self.spec("955"), uuid: "refund-1") == .notRedeemed)
        await redeemRefused("955")
        #expect(try await Self.notify(world.vault, "REFUND_REVERSED", Self.spec("955"), uuid: "reversal-1") == .reinstated)
        #expect(try await Self.notify(world.vault, "REFUND_REVERSED", Self.spec("955"), uuid: "reversal-1") == .duplicate)
        #expect(try await Self.notify(world.vault, "REFUND", Self.spec("955"), uuid: "refund-1") == .alreadyRevoked, "Apple's retry")
        #expect(try await Self.notify(world.vault, "REFUND", Self.spec("955"), uuid: "refund-2") == .notRedeemed, "refunded again")
        await redeemRefused("955")
        #expect(try await Self.notify(world.vault, "REFUND", Self.spec("955"), uuid: "refund-3") == .alreadyRevoked, "counted all the same")
        #expect(try await Self.notify(world.vault, "REFUND", Self.spec("955"), uuid: "refund-3") == .duplicate)
        // An older reversal arriving now (Apple retrying it): three refunds, two reversals.
        #expect(try await Self.notify(world.vault, "REFUND_REVERSED", Self.spec("955"), uuid: "reversal-2") == .recorded)
        await redeemRefused("955")
        #expect(try await Self.notify(world.vault, "REFUND_REVERSED", Self.spec("955"), uuid: "reversal-3") == .reinstated)
        let bought = try await world.vault.redeem(try Self.request(Self.spec("955")), now: testNow)
        #expect(try await world.vault.exchange(grant: try #require(bought.grant), now: testNow).assets.count == 1)
        #expect(await world.events() == ["refundReversed", "revokedAgain", "revokedAgain", "refundReversed", "refundReversed"])
        // A reversal of a purchase never refunded reverses nothing: its later refund holds.
        #expect(try await Self.notify(world.vault, "REFUND_REVERSED", Self.spec("956"), uuid: "reversal-4") == .recorded)
        #expect(try await Self.notify(world.vault, "REFUND", Self.spec("956"), uuid: "refund-4") == .notRedeemed)
        await redeemRefused("956")
        // A REVOKE (family sharing ended) is not a refund: no reversal lifts it.
        #expect(try await Self.notify(world.vault, "REVOKE", Self.spec("957"), uuid: "revoke-1") == .notRedeemed)
        #expect(try await Self.notify(world.vault, "REFUND_REVERSED", Self.spec("957"), uuid: "reversal-5") == .recorded)
        await redeemRefused("957")
        try await world.expectIntact()
    }

    /// A REVOKE (family sharing ended) or an admin's revocation is not Apple's refund to
    /// reverse: a REFUND_REVERSED after it is recorded and changes nothing.
    @Test func aRevokeOrAnAdminsRevocationIsNotReversed() async throws {
        let world = try await World()
        var shareable = Self.spec("975", product: Self.shared)
        shareable.ownershipType = "FAMILY_SHARED"
        let family = try await world.vault.redeem(try Self.request(shareable), now: testNow)
        shareable.revocationType = "FAMILY_REVOKE"
        #expect(try await Self.notify(world.vault, "REVOKE", shareable) == .revoked)
        #expect(try await Self.notify(world.vault, "REFUND_REVERSED", shareable) == .recorded)
        VaultTests.expect(
            await VaultTests.failure { try await world.vault.exchange(grant: try #require(family.grant), now: testNow) }, 403, .grantInvalid)
        let bought = try await world.vault.redeem(try Self.request(Self.spec("976")), now: testNow)
        _ = try await world.vault.revoke(transactionId: "976", reason: "chargeback", by: "ops", now: testNow)
        #expect(try await Self.notify(world.vault, "REFUND_REVERSED", Self.spec("976")) == .recorded)
        VaultTests.expect(
            await VaultTests.failure { try await world.vault.exchange(grant: try #require(bought.grant), now: testNow) }, 403, .grantInvalid)
        #expect(await world.events() == ["recordedOnly", "recordedOnly"])
        try await world.expectIntact()
    }

    @Test func partialRefundsFollowThePolicy() async throws {
        var prorated = Self.spec("960")
        prorated.revocationType = "REFUND_PRORATED"
        prorated.revocationPercentage = 25_000
        // Default: any refund revokes; the share is recorded in the revocation's reason.
        let strict = try await World()
        _ = try await strict.vault.redeem(try Self.request(Self.spec("960")), now: testNow)
        #expect(try await Self.notify(strict.vault, "REFUND", prorated) == .revoked)
        #expect(await strict.ledger.revocations(after: 0, limit: 1).first?.reason == "REFUND REFUND_PRORATED 25.000%")
        // revokeFullOnly: a prorated refund is recorded, the purchase still entitles; a full one revokes.
        let lenient = try await World(refundPolicy: .revokeFullOnly)
        let kept = try await lenient.vault.redeem(try Self.request(Self.spec("960")), now: testNow)
        #expect(try await Self.notify(lenient.vault, "REFUND", prorated) == .recorded)
        #expect(try await lenient.vault.exchange(grant: try #require(kept.grant), now: testNow).assets.count == 1)
        #expect(await lenient.events() == ["partialRefund"])
        var full = Self.spec("960")
        full.revocationType = "REFUND_FULL"
        #expect(try await Self.notify(lenient.vault, "REFUND", full) == .revoked)
        try await lenient.expectIntact()
    }

    @Test func familySharingIsPerProductAndFamilyRevokeEndsIt() async throws {
        let world = try await World()
        var sharedPack = Self.spec("970")
        sharedPack.ownershipType = "FAMILY_SHARED"
        VaultTests.expect(
            await VaultTests.failure { try await world.vault.redeem(try Self.request(sharedPack), now: testNow) }, 403, .familySharingNotAllowed)
        var shareable = Self.spec("971", product: Self.shared)
        shareable.ownershipType = "FAMILY_SHARED"
        let family = try await world.vault.redeem(try Self.request(shareable), now: testNow)
        shareable.revocationType = "FAMILY_REVOKE"
        #expect(try await Self.notify(world.vault, "REVOKE", shareable) == .revoked)
        VaultTests.expect(
            await VaultTests.failure { try await world.vault.exchange(grant: try #require(family.grant), now: testNow) }, 403, .grantInvalid)
        #expect(await world.attempts() == ["familySharingNotAllowed 970"])
    }

    /// Real Apple data (Sandbox, a Session Pro subscription): J10 is a DID_RENEW whose nested
    /// transaction (J10a) and renewal info (J10b) are separately signed JWS; J23 a later REFUND
    /// of the same subscription (same original transaction id).
    @Test func realAppleVectorsDriveASubscriptionFromRedemptionToRefund() async throws {
        let bundle = "com.loki-project.loki-messenger"
        let catalogue = InMemoryCatalogue()
        let ledger = InMemoryLedger(signer: LedgerSigner(privateKey: .init()), checkpointEvery: 2)
        _ = try await catalogue.addAssetVersion(
            assetId: "pro", name: "pro.bin", contentType: "application/octet-stream", size: 3, sha256: fakeHash("pro"), at: testNow)
        try await catalogue.putProduct(
            Product(
                productId: "com.getsession.org.pro_sub", bundleId: bundle, type: .autoRenewable, assetIds: ["pro"], title: "Session Pro",
                updatedAt: testNow))
        let vault = Vault(
            verifier: AppStoreVerifier(
                configuration: VerifierConfiguration(anchors: [try .apple(AppleRoots.appleRootCAG3, allowSandbox: true)], bundleIds: [bundle])),
            catalogue: catalogue, ledger: ledger, tokens: VaultTests.tokens)
        func text(_ name: String) throws -> String {
            String(decoding: try Fixtures.bytes(name), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let renewNotification = try text("jws/J10_real_sandbox_notification_DID_RENEW_1759302518835_session.jws")
        let renewedTransaction = try text("jws/J10a_real_sandbox_txn_nested_in_J10_session.jws")
        let refundNotification = try text("jws/J23_real_sandbox_notification_REFUND_1760592122788_session.jws")
        let during = Date(timeIntervalSince1970: 1_759_302_600)  // after J10a's purchase, before its expiresDate
        let expires = Date(timeIntervalSince1970: 1_759_302_732)

        // DID_RENEW arrives first: recorded against the purchase, which is not redeemed yet.
        #expect(try await vault.handleNotification(renewNotification, now: during) == .updated)
        #expect(try await vault.handleNotification(renewNotification, now: during) == .duplicate, "Apple retries: recorded once")
        let redeemed = try await vault.redeem(
            RedemptionRequest(proof: .signedTransaction(renewedTransaction), clientAddress: "192.0.2.1"), now: during)
        #expect(redeemed.redemption.replayKey == "2000001024993299:com.getsession.org.pro_sub" && redeemed.redemption.expiresAt == expires)
        #expect(redeemed.assets.first?.expiresAt == expires, "the token ends with the period")
        let events = await ledger.purchaseEvents(environment: "Sandbox", replayKey: "2000001024993299:com.getsession.org.pro_sub")
        #expect(events.map(\.kind) == ["subscriptionStatus"] && events.first?.expiresAt == expires)
        #expect(events.first?.reference == "1a7cdc3d-9360-49c3-ae37-0423e4c6e7c7" && events.first?.detail.hasPrefix("DID_RENEW") == true)
        // The three-minute Sandbox period ends: the grant no longer gives tokens.
        VaultTests.expect(
            await VaultTests.failure { try await vault.exchange(grant: try #require(redeemed.grant), now: expires.addingTimeInterval(1)) }, 403,
            .entitlementExpired)
        // J23 refunds a later period of the same subscription: the purchase is revoked.
        #expect(try await vault.handleNotification(refundNotification, now: Date(timeIntervalSince1970: 1_760_592_200)) == .revoked)
        let revocation = try #require(await ledger.revocation(of: redeemed.redemption))
        #expect(revocation.redemptionId == redeemed.redemption.redemptionId && revocation.reference == "caeda1df-9950-458d-87a7-93bb009e7391")
        VaultTests.expect(
            await VaultTests.failure { try await vault.exchange(grant: try #require(redeemed.grant), now: during) }, 403, .grantInvalid)
    }
}

/// `coffer sandbox`: subscription transactions with expiry, renewal info, the subscription and
/// refund notifications with their subtypes — what a game team tests its integration with.
@Suite struct SubscriptionMintingCLITests {
    @Test func theSandboxMintsSubscriptionsRenewalInfoAndEveryNotificationType() async throws {
        try await withTemporaryDirectory(prefix: "coffer-mint") { dir in
            let ca = dir.appendingPathComponent("ca").path
            #expect(try await CofferExecutable.run(["sandbox", "init", "--dir", ca]).status == 0)
            let loaded = try SandboxCA.load { name in Array(try Data(contentsOf: URL(fileURLWithPath: SandboxDirectory(ca).file(name)))) }
            let verifier = try sandboxVerifier(loaded)
            let common = ["--dir", ca, "--bundle-id", "com.coffer.demo", "--product", "com.coffer.demo.season", "--product-type", "autoRenewable"]
            // A subscription needs an expiry: a usage error otherwise.
            #expect(try await CofferExecutable.run(["sandbox", "transaction"] + common + ["--transaction-id", "1"]).status == 2)
            let minted = try await CofferExecutable.run(["sandbox", "transaction"] + common + ["--transaction-id", "1", "--expires-in", "3600"])
            #expect(minted.status == 0)
            guard
                case .valid(let evidence) = await verifier.verifySignedData(
                    minted.stdout.trimmingCharacters(in: .whitespacesAndNewlines), now: Date()),
                case .transaction(let t) = evidence.signed
            else {
                Issue.record("the minted transaction does not verify")
                return
            }
            #expect(t.productType == .autoRenewableSubscription && (t.expiresDate?.date.timeIntervalSinceNow ?? 0) > 3500)

            for (type, subtype, extra) in [
                ("SUBSCRIBED", "INITIAL_BUY", [String]()), ("DID_RENEW", nil, []),
                ("DID_FAIL_TO_RENEW", "GRACE_PERIOD", ["--grace-period-in", "86400", "--billing-retry"]),
                ("GRACE_PERIOD_EXPIRED", nil, []), ("EXPIRED", "VOLUNTARY", ["--auto-renew-off"]),
                ("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", []),
                ("REFUND", nil, ["--revocation-type", "REFUND_PRORATED", "--revocation-percentage", "25000"]), ("REFUND_REVERSED", nil, []),
                ("REFUND_DECLINED", nil, []), ("REVOKE", nil, ["--revocation-type", "FAMILY_REVOKE", "--ownership", "FAMILY_SHARED"]),
            ] as [(String, String?, [String])] {
                let arguments =
                    ["sandbox", "notification", "--type", type] + (subtype.map { ["--subtype", $0] } ?? []) + common
                    + ["--transaction-id", "2", "--original-transaction-id", "1", "--expires-in", "60"] + extra
                let run = try await CofferExecutable.run(arguments)
                #expect(run.status == 0, "\(type): \(run.stderr)")
                let result = await verifier.verifySignedData(run.stdout.trimmingCharacters(in: .whitespacesAndNewlines), now: Date())
                guard case .valid(let e) = result, case .notification(let n) = e.signed else {
                    Issue.record("\(type) does not verify: \(String(describing: result.error))")
                    continue
                }
                #expect(n.notificationType == type && n.subtype == subtype)
                #expect(n.transaction?.originalTransactionId == "1" && n.renewalInfo?.originalTransactionId == "1", "\(type)")
                switch type {
                case "DID_FAIL_TO_RENEW":
                    #expect(
                        (n.renewalInfo?.gracePeriodExpiresDate?.date.timeIntervalSinceNow ?? 0) > 86000
                            && n.renewalInfo?.isInBillingRetryPeriod == true)
                case "EXPIRED": #expect(n.renewalInfo?.autoRenewStatus == 0)
                case "REFUND": #expect(n.transaction?.revocationType == "REFUND_PRORATED" && n.transaction?.revocationPercentage == 25000)
                case "REVOKE": #expect(n.transaction?.inAppOwnershipType == "FAMILY_SHARED" && n.transaction?.revocationDate != nil)
                default: break
                }
            }
        }
    }
}
