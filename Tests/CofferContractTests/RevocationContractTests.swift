import CofferCore
import CofferTestSupport
import Foundation
import Testing

/// ``LedgerRepository``: revocations (refunds, admin revocations) and how they refuse redemptions.
@Suite("Ledger contract: revocations")
struct RevocationContractTests {
    /// A revocation of the Sandbox purchase keyed `key`.
    static func revocation(_ transactionId: String, key: String? = nil, environment: String? = "Sandbox", at offset: Double = 10) -> Revocation {
        Revocation(
            redemptionId: "", transactionId: transactionId, revokedAt: instant(offset - 1), reason: "REFUND", source: .notification,
            reference: "n-\(transactionId)", recordedAt: instant(offset), environment: environment, replayKey: key ?? transactionId)
    }

    @Test("revoking a redeemed purchase fills in its redemption; a second revocation is alreadyRevoked", arguments: Backend.allCases)
    func revokeRedeemed(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let ledger = storage.ledger
            let redemption = try #require(try await ledger.insert(makeRedemption("100")).inserted)
            #expect(try await ledger.revocation(of: redemption) == nil)
            let outcome = try await ledger.revoke(Self.revocation("100"), keepUnredeemed: false)
            var expected = Self.revocation("100")
            expected.sequence = 1
            expected.redemptionId = redemption.redemptionId
            #expect(outcome == .revoked(expected))
            #expect(try await ledger.revocation(of: redemption) == expected)
            #expect(try await ledger.revoke(Self.revocation("100", at: 20), keepUnredeemed: false) == .alreadyRevoked)
            #expect(try await ledger.revoke(Self.revocation("100", at: 20), keepUnredeemed: true) == .alreadyRevoked)
            #expect(try await ledger.revocations(after: 0, limit: 10) == [expected])
            // Still redeemed: a replay of a revoked purchase is a replay.
            var replay = makeRedemption("100", at: 30)
            replay.redemptionId = "r-100-again"
            replay.grantHash = fakeHash("grant-100-again")
            #expect(try await ledger.insert(replay, refusals: LedgerContractTests.refusals) == .alreadyRedeemed)
            #expect(try await ledger.attempts(AuditFilter()).map(\.code) == ["alreadyRedeemed"])
        }
    }

    @Test("an unredeemed purchase: notRedeemed, or kept; a kept revocation refuses the redemption", arguments: Backend.allCases)
    func revokeUnredeemed(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let ledger = storage.ledger
            #expect(try await ledger.revoke(Self.revocation("200"), keepUnredeemed: false) == .notRedeemed)
            #expect(try await ledger.revocations(after: 0, limit: 10).isEmpty)
            var kept = Self.revocation("200")
            kept.sequence = 1
            #expect(try await ledger.revoke(Self.revocation("200"), keepUnredeemed: true) == .recordedUnredeemed(kept))
            #expect(kept.redemptionId == "")
            #expect(try await ledger.revoke(Self.revocation("200"), keepUnredeemed: true) == .alreadyRevoked)

            let outcome = try await ledger.insert(makeRedemption("200", at: 20), refusals: LedgerContractTests.refusals)
            #expect(outcome == .revoked(kept))
            #expect(try await ledger.redemptions(AuditFilter()).isEmpty)
            var refusal = LedgerContractTests.refusals.revoked
            refusal.sequence = 1
            #expect(try await ledger.attempts(AuditFilter()) == [refusal], "the revoked refusal, in the same call")
            #expect(try await ledger.revocation(of: makeRedemption("200")) == kept, "found by environment and key")
            var inProduction = makeRedemption("200")
            inProduction.environment = "Production"
            let production = try #require(try await ledger.insert(inProduction).inserted, "another environment is another purchase")
            #expect(try await ledger.revocation(of: production) == nil)
        }
    }

    /// A refund reversed before the purchase was redeemed (REFUND, then REFUND_REVERSED, then the
    /// player redeems): Apple reinstated it, so its kept revocation no longer refuses — a refund
    /// again refuses once more. The events are what the vault appends for those notifications.
    @Test("a kept revocation reversed by a chained event no longer refuses; refunded again, it does", arguments: Backend.allCases)
    func keptRevocationReversed(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let ledger = storage.ledger
            func event(_ kind: PurchaseEvent.Kind, _ reference: String, at offset: Double) -> PurchaseEvent {
                PurchaseEvent(
                    at: instant(offset), kind: kind, environment: "Sandbox", replayKey: "250", redemptionId: "", transactionId: "250",
                    detail: kind.rawValue, source: .notification, reference: reference)
            }
            var kept = Self.revocation("250")
            kept.sequence = 1
            #expect(try await ledger.revoke(Self.revocation("250"), keepUnredeemed: true) == .recordedUnredeemed(kept))
            #expect(try await ledger.revocation(environment: "Sandbox", replayKey: "250") == kept)
            #expect(try await ledger.revocation(environment: "Production", replayKey: "250") == nil)
            // A recorded-only event (a reversal of nothing) reverses nothing.
            _ = try await ledger.append(event(.recordedOnly, "n-noop", at: 11))
            #expect(try await ledger.insert(makeRedemption("250", at: 12)) == .revoked(kept))
            _ = try await ledger.append(event(.refundReversed, "n-reversed", at: 13))
            _ = try await ledger.append(event(.revokedAgain, "n-again", at: 14))
            #expect(try await ledger.insert(makeRedemption("250", at: 15)) == .revoked(kept), "refunded again after the reversal")
            _ = try await ledger.append(event(.refundReversed, "n-reversed-again", at: 16))
            let redeemed = try #require(try await ledger.insert(makeRedemption("250", at: 17)).inserted, "reversed: redeemable")
            #expect(try await ledger.revocation(of: redeemed) == kept)
            #expect(try await ledger.insert(makeRedemption("250", at: 18)) == .alreadyRedeemed)
            // Chain order counts too: as many reversals as refunds, but a refund last, holds.
            var third = Self.revocation("252")
            third.sequence = 2
            #expect(try await ledger.revoke(Self.revocation("252"), keepUnredeemed: true) == .recordedUnredeemed(third))
            for (i, kind) in [PurchaseEvent.Kind.refundReversed, .refundReversed, .revokedAgain].enumerated() {
                _ = try await ledger.append(
                    PurchaseEvent(
                        at: instant(20 + Double(i)), kind: kind, environment: "Sandbox", replayKey: "252", redemptionId: "", transactionId: "252",
                        detail: kind.rawValue, source: .notification, reference: "n-252-\(i)"))
            }
            #expect(try await ledger.insert(makeRedemption("252", at: 24)) == .revoked(third))
            // Another purchase's reversal does not reverse this one's.
            var other = Self.revocation("251")
            other.sequence = 3
            #expect(try await ledger.revoke(Self.revocation("251"), keepUnredeemed: true) == .recordedUnredeemed(other))
            #expect(try await ledger.insert(makeRedemption("251", at: 19)) == .revoked(other))
        }
    }

    @Test("a revocation is keyed like the redemption: a non-consumable by its original transaction id", arguments: Backend.allCases)
    func revokeByReplayKey(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let ledger = storage.ledger
            var restored = makeRedemption("301", original: "300")
            restored.replayKey = "300"
            let stored = try #require(try await ledger.insert(restored).inserted)
            // Apple's refund names another transaction of the same purchase.
            let outcome = try await ledger.revoke(Self.revocation("300", key: "300"), keepUnredeemed: true)
            guard case .revoked(let revocation) = outcome else {
                Issue.record("expected .revoked, got \(outcome)")
                return
            }
            #expect(revocation.redemptionId == stored.redemptionId)
            #expect(try await ledger.revocation(of: stored) == revocation)
            #expect(try await ledger.revoke(Self.revocation("300", environment: "Production"), keepUnredeemed: false) == .notRedeemed)
        }
    }

    @Test("revocations page by sequence", arguments: Backend.allCases)
    func paging(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let ledger = storage.ledger
            for index in 0..<5 {
                _ = try await ledger.insert(makeRedemption("40\(index)"))
                _ = try await ledger.revoke(Self.revocation("40\(index)", at: Double(10 + index)), keepUnredeemed: false)
            }
            let all = try await ledger.revocations(after: 0, limit: 100)
            #expect(all.map(\.sequence) == [1, 2, 3, 4, 5])
            #expect(all.map(\.transactionId) == ["400", "401", "402", "403", "404"])
            #expect(all.map(\.redemptionId) == ["r-400", "r-401", "r-402", "r-403", "r-404"])
            #expect(try await ledger.revocations(after: 2, limit: 2).map(\.sequence) == [3, 4])
            #expect(try await ledger.revocations(after: 4, limit: 2).map(\.sequence) == [5])
            #expect(try await ledger.revocations(after: 5, limit: 2).isEmpty)
            #expect(try await ledger.revocations(after: 0, limit: 0).isEmpty)
        }
    }
}
