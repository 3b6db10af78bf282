import CofferCore
import CofferSandbox
import CofferTestSupport
import Foundation
import Synchronization
import Testing

/// A ledger whose next inserts end as a PostgreSQL write whose answer was lost can: the
/// database stopped after the batch's COMMIT and the writer could not find out whether it
/// committed (``LedgerWriteInDoubt``) — committed (`commit: true`) or not. Everything else is
/// the wrapped ledger's.
final class LostAnswerLedger: LedgerRepository {
    let base: InMemoryLedger
    private let pending = Mutex<[Bool]>([])

    init(_ base: InMemoryLedger) { self.base = base }

    /// The next insert's answer is lost, after it committed (or not).
    func loseNextAnswer(commit: Bool) { pending.withLock { $0.append(commit) } }

    func insert(_ redemption: Redemption, refusals: InsertRefusals?) async throws -> LedgerInsertOutcome {
        guard let commit = pending.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) else {
            return try await base.insert(redemption, refusals: refusals)
        }
        if commit { _ = try await base.insert(redemption, refusals: refusals) }
        throw LedgerWriteInDoubt(CancellationError(), redemptionIds: [redemption.redemptionId])
    }
    func record(_ attempt: RejectedAttempt) async throws { try await base.record(attempt) }
    func redemption(grantHash: String) async throws -> Redemption? { await base.redemption(grantHash: grantHash) }
    func redemptions(_ filter: AuditFilter) async throws -> [Redemption] { await base.redemptions(filter) }
    func attempts(_ filter: AuditFilter) async throws -> [RejectedAttempt] { await base.attempts(filter) }
    func hourlyCounts(from: Date, to: Date) async throws -> [HourlyCount] { await base.hourlyCounts(from: from, to: to) }
    func revoke(_ revocation: Revocation, keepUnredeemed: Bool, logging: AdminAction?) async throws -> RevocationOutcome {
        try await base.revoke(revocation, keepUnredeemed: keepUnredeemed, logging: logging)
    }
    func revocation(of redemption: Redemption) async throws -> Revocation? { await base.revocation(of: redemption) }
    func revocation(environment: String, replayKey: String) async throws -> Revocation? {
        await base.revocation(environment: environment, replayKey: replayKey)
    }
    func revocations(after: Int64, limit: Int) async throws -> [Revocation] { await base.revocations(after: after, limit: limit) }
    func redemption(environment: String, replayKey: String) async throws -> Redemption? {
        await base.redemption(environment: environment, replayKey: replayKey)
    }
    func append(_ event: PurchaseEvent, logging: AdminAction?) async throws -> PurchaseEventOutcome {
        try await base.append(event, logging: logging)
    }
    func purchaseEvents(environment: String, replayKey: String) async throws -> [PurchaseEvent] {
        await base.purchaseEvents(environment: environment, replayKey: replayKey)
    }
    func purchaseEvents(after: Int64, limit: Int) async throws -> [PurchaseEvent] { await base.purchaseEvents(after: after, limit: limit) }
}

/// A redemption answered 503 because its write's outcome could not be known (the database
/// stopped right after the COMMIT, for longer than the writer asks): before, it had committed
/// and every retry got 409 — the player paid and never got the content. Now the instance keeps
/// what it answered in doubt for the token lifetime and hands it, once, to the first retry of
/// the same purchase (its player's, when it was bound to one) if the ledger holds it.
@Suite struct InDoubtRedemptionTests {
    struct World {
        let vault: Vault
        let ledger: LostAnswerLedger
        let signer = LedgerSigner(privateKey: .init())

        init() async throws {
            let catalogue = InMemoryCatalogue()
            ledger = LostAnswerLedger(InMemoryLedger(signer: signer, checkpointEvery: 3))
            _ = try await catalogue.addAssetVersion(
                assetId: "level", name: "level.bin", contentType: "application/octet-stream", size: 3, sha256: fakeHash("level"), at: testNow)
            for (id, type) in [(PlayerVaultTests.pack, ProductType.nonConsumable), ("com.coffer.demo.gems", .consumable)] {
                try await catalogue.putProduct(
                    Product(productId: id, bundleId: PlayerVaultTests.bundle, type: type, assetIds: ["level"], title: id, updatedAt: testNow))
            }
            vault = Vault(verifier: try sandboxVerifier(), catalogue: catalogue, ledger: ledger, tokens: VaultTests.tokens, tokenTTL: 600)
        }

        func redemptions() async -> [Redemption] { await ledger.base.redemptions(AuditFilter()) }
    }

    static func gems(_ transactionId: String) -> TransactionSpec {
        PlayerVaultTests.spec(transactionId, product: "com.coffer.demo.gems", type: "Consumable")
    }

    @Test func aCommittedRedemptionAnsweredInDoubtIsHandedToTheFirstRetryOnce() async throws {
        let world = try await World()
        world.ledger.loseNextAnswer(commit: true)
        let request = try PlayerVaultTests.request(Self.gems("5100"))
        VaultTests.expect(await VaultTests.failure { try await world.vault.redeem(request, now: testNow) }, 503, .storageUnavailable)
        let stored = try #require(await world.redemptions().first, "it committed")
        // Without player identity only the same requester gets it: the same proof from the same
        // address. Another proof of the purchase (a receipt leaked later), or another address: 409.
        VaultTests.expect(
            await VaultTests.failure { try await world.vault.redeem(try PlayerVaultTests.request(Self.gems("5100")), now: testNow) }, 409,
            .alreadyRedeemed)
        var elsewhere = request
        elsewhere.clientAddress = "198.51.100.9"
        VaultTests.expect(await VaultTests.failure { try await world.vault.redeem(elsewhere, now: testNow) }, 409, .alreadyRedeemed)
        // The retry: 201, the stored redemption, a grant that works.
        let retry = try await world.vault.redeem(request, now: testNow.addingTimeInterval(30))
        #expect(retry.redemption.redemptionId == stored.redemptionId && !retry.restored)
        #expect(retry.assets.count == 1)
        let grant = try #require(retry.grant)
        #expect(try await world.vault.exchange(grant: grant, now: testNow.addingTimeInterval(31)).assets.count == 1)
        // Once: the next is a replay.
        VaultTests.expect(
            await VaultTests.failure { try await world.vault.redeem(request, now: testNow.addingTimeInterval(32)) }, 409, .alreadyRedeemed)
        #expect(await world.redemptions().count == 1)
    }

    @Test func oneThatDidNotCommitIsRedeemedAfreshOnceSettledAndAnExpiredOneIsAReplay() async throws {
        let world = try await World()
        world.ledger.loseNextAnswer(commit: false)
        let request = try PlayerVaultTests.request(Self.gems("5200"))
        VaultTests.expect(await VaultTests.failure { try await world.vault.redeem(request, now: testNow) }, 503, .storageUnavailable)
        #expect(await world.redemptions().isEmpty)
        // Not in the ledger while the earlier write may still commit: 503 again, nothing written.
        VaultTests.expect(
            await VaultTests.failure { try await world.vault.redeem(request, now: testNow.addingTimeInterval(5)) }, 503, .storageUnavailable)
        #expect(await world.redemptions().isEmpty)
        // Settled and not there: redeemed afresh.
        let fresh = try await world.vault.redeem(request, now: testNow.addingTimeInterval(31))
        let ids = await world.redemptions().map(\.redemptionId)
        #expect(fresh.grant != nil && ids == [fresh.redemption.redemptionId])
        // Kept for the token lifetime only: a retry after it is a replay.
        world.ledger.loseNextAnswer(commit: true)
        let late = try PlayerVaultTests.request(Self.gems("5201"))
        VaultTests.expect(await VaultTests.failure { try await world.vault.redeem(late, now: testNow) }, 503, .storageUnavailable)
        VaultTests.expect(
            await VaultTests.failure { try await world.vault.redeem(late, now: testNow.addingTimeInterval(601)) }, 409, .alreadyRedeemed)
    }

    @Test func oneBoundToAPlayerGoesToThatPlayerOnly() async throws {
        let world = try await World()
        world.ledger.loseNextAnswer(commit: true)
        let spec = PlayerVaultTests.spec("5300")
        VaultTests.expect(
            await VaultTests.failure {
                try await world.vault.redeem(try PlayerVaultTests.request(spec, player: PlayerVaultTests.alice), now: testNow)
            },
            503, .storageUnavailable)
        VaultTests.expect(
            await VaultTests.failure {
                try await world.vault.redeem(try PlayerVaultTests.request(spec, player: PlayerVaultTests.bob), now: testNow.addingTimeInterval(1))
            }, 409, .alreadyRedeemed)
        let retry = try await world.vault.redeem(
            try PlayerVaultTests.request(spec, player: PlayerVaultTests.alice), now: testNow.addingTimeInterval(2))
        #expect(retry.grant != nil && !retry.restored && retry.redemption.playerId == PlayerVaultTests.alice.id)
        // Then as any purchase of hers: a restore, without a new grant.
        let again = try await world.vault.redeem(
            try PlayerVaultTests.request(spec, player: PlayerVaultTests.alice), now: testNow.addingTimeInterval(3))
        #expect(again.restored && again.grant == nil)
    }
}
