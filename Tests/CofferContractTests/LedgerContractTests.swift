import CofferCore
import CofferTestSupport
import Foundation
import Testing

/// ``LedgerRepository``: inserts and the replay rule.
@Suite("Ledger contract: inserts and replays")
struct LedgerContractTests {
    static let refusals = InsertRefusals(
        replay: makeAttempt(code: "alreadyRedeemed", transactionId: "r", product: "com.example.gems", at: 50),
        revoked: makeAttempt(code: "revoked", transactionId: "v", product: "com.example.gems", at: 51))

    @Test("insert assigns a sequence and keeps every field; a replay is .alreadyRedeemed and adds no row", arguments: Backend.allCases)
    func insertAndReplay(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let ledger = storage.ledger
            let first = makeRedemption(
                "1000000001", original: "1000000000", purchaseDate: instant(-60.5), token: "8E2A1C4B-0000-4000-8000-000000000001")
            let row = try #require(try await ledger.insert(first).inserted)
            var expected = first
            expected.sequence = 1
            #expect(row == expected)

            var replay = makeRedemption("1000000001", at: 99)
            replay.redemptionId = "another-redemption"
            replay.grantHash = fakeHash("another-grant")
            #expect(try await ledger.insert(replay) == .alreadyRedeemed)
            // Every column round-trips.
            #expect(try await ledger.redemptions(AuditFilter()) == [expected])
            #expect(try await ledger.redemption(grantHash: first.grantHash) == expected)
            #expect(try await ledger.redemption(grantHash: replay.grantHash) == nil)
            #expect(try await ledger.attempts(AuditFilter()).isEmpty, "no refusals given, none recorded")

            let second = try #require(try await ledger.insert(makeRedemption("1000000002")).inserted)
            #expect(second.sequence == 2)
        }
    }

    @Test("a replay records the replay refusal in the same call", arguments: Backend.allCases)
    func replayRecordsItsRefusal(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let ledger = storage.ledger
            #expect(try await ledger.insert(makeRedemption("7"), refusals: Self.refusals).inserted != nil)
            #expect(try await ledger.attempts(AuditFilter()).isEmpty, "an insert that succeeds records no refusal")
            var again = makeRedemption("7", at: 50)
            again.redemptionId = "r-7-again"
            again.grantHash = fakeHash("grant-7-again")
            #expect(try await ledger.insert(again, refusals: Self.refusals) == .alreadyRedeemed)
            var recorded = Self.refusals.replay
            recorded.sequence = 1
            #expect(try await ledger.attempts(AuditFilter()) == [recorded])
            #expect(try await ledger.redemptions(AuditFilter()).count == 1)
        }
    }

    @Test("the replay key is per environment: Sandbox and Production are two purchases", arguments: Backend.allCases)
    func environments(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let ledger = storage.ledger
            let sandbox = makeRedemption("42")
            var production = makeRedemption("42")
            production.environment = "Production"
            production.redemptionId = "r-42-production"
            production.grantHash = fakeHash("grant-42-production")
            #expect(try await ledger.insert(sandbox).inserted?.sequence == 1)
            #expect(try await ledger.insert(production).inserted?.sequence == 2)
            var replay = production
            replay.redemptionId = "r-42-production-again"
            replay.grantHash = fakeHash("grant-42-production-again")
            #expect(try await ledger.insert(replay) == .alreadyRedeemed)
        }
    }

    @Test("a non-consumable is keyed by its original transaction id: a restore is a replay", arguments: Backend.allCases)
    func nonConsumablesByOriginalTransaction(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let ledger = storage.ledger
            var bought = makeRedemption("500", original: "500")
            bought.replayKey = Vault.replayKey(type: .nonConsumable, transactionId: "500", original: "500")
            var restored = makeRedemption("501", original: "500")
            restored.replayKey = Vault.replayKey(type: .nonConsumable, transactionId: "501", original: "500")
            #expect(restored.effectiveReplayKey == "500")
            #expect(try await ledger.insert(bought).inserted != nil)
            #expect(try await ledger.insert(restored) == .alreadyRedeemed)
            // Consumables are keyed by their own transaction id: two of one original are two purchases.
            var gems1 = makeRedemption("600", original: "599")
            gems1.replayKey = Vault.replayKey(type: .consumable, transactionId: "600", original: "599")
            var gems2 = makeRedemption("601", original: "599")
            gems2.replayKey = Vault.replayKey(type: .consumable, transactionId: "601", original: "599")
            #expect(try await ledger.insert(gems1).inserted != nil)
            #expect(try await ledger.insert(gems2).inserted != nil)
            #expect(try await ledger.redemptions(AuditFilter()).map(\.effectiveReplayKey) == ["500", "600", "601"])
        }
    }

    @Test("a row without a replay key (written before replay keys) also matches by original transaction id", arguments: Backend.allCases)
    func rowsWithoutReplayKeys(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let ledger = storage.ledger
            let old = makeRedemption("2001", original: "2000")
            #expect(old.replayKey == nil)
            #expect(try await ledger.insert(old).inserted != nil)
            #expect(try await ledger.insert(makeRedemption("2001", at: 5)) == .alreadyRedeemed, "keyed by its transaction id")
            var restored = makeRedemption("2002", original: "2000")
            restored.replayKey = "2000"
            #expect(try await ledger.insert(restored) == .alreadyRedeemed, "the same purchase, restored")
            var otherEnvironment = restored
            otherEnvironment.environment = "Production"
            #expect(try await ledger.insert(otherEnvironment).inserted != nil)
        }
    }

    @Test("identifiers are compared byte for byte", arguments: Backend.allCases)
    func identifiersAreBytes(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let ledger = storage.ledger
            #expect(try await ledger.insert(makeRedemption("caf\u{E9}")).inserted != nil)
            #expect(try await ledger.insert(makeRedemption("cafe\u{301}")).inserted != nil, "another transaction id to a database")
            var filter = AuditFilter()
            filter.transactionId = "cafe\u{301}"
            #expect(try await ledger.redemptions(filter).map(\.sequence) == [2])
        }
    }

    @Test("a unique collision on another column (redemption id, grant hash) is an error, not a replay", arguments: Backend.allCases)
    func otherUniqueViolationPropagates(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let ledger = storage.ledger
            _ = try await ledger.insert(makeRedemption("3000000001"))
            var sameGrant = makeRedemption("3000000002")
            sameGrant.grantHash = makeRedemption("3000000001").grantHash
            await #expect(throws: (any Error).self) { _ = try await ledger.insert(sameGrant) }
            var sameRedemptionId = makeRedemption("3000000003")
            sameRedemptionId.redemptionId = "r-3000000001"
            await #expect(throws: (any Error).self) { _ = try await ledger.insert(sameRedemptionId) }
            #expect(try await ledger.redemptions(AuditFilter()).count == 1)
            #expect(try await storage.ledgerAudit.chainedEntries(after: 0, limit: 10).count == 1, "nothing chained for a refused row")
            // No number is lost to a refused row: rows are numbered in the writing transaction
            // (on PostgreSQL under the chain's lock, not by a sequence that skips on rollback).
            let second = try await ledger.insert(makeRedemption("3000000002")).inserted
            #expect(second?.sequence == 2, "the id is still free, and so is the number")
            #expect(try await storage.ledgerAudit.chainedEntries(after: 0, limit: 10).map(\.entry.sequence) == [1, 2])
        }
    }

    @Test("a value holding U+0000 is refused outright, never stored cut", arguments: Backend.allCases)
    func nulIsRefused(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let ledger = storage.ledger
            var attempt = makeAttempt(code: "x", transactionId: nil)
            attempt.detail = "a\u{0}b"
            await #expect(throws: (any Error).self) { try await ledger.record(attempt) }
            var redemption = makeRedemption("9")
            redemption.clientAddress = "192.0.2.1\u{0}"
            await #expect(throws: (any Error).self) { _ = try await ledger.insert(redemption) }
            #expect(try await ledger.attempts(AuditFilter()).isEmpty)
            #expect(try await ledger.redemptions(AuditFilter()).isEmpty)
            #expect(try await storage.ledgerAudit.chainedEntries(after: 0, limit: 10).isEmpty)
            #expect(try await ledger.insert(makeRedemption("9")).inserted?.sequence == 1)
        }
    }

    @Test("64 concurrent inserts of one transaction id: exactly one is inserted", arguments: Backend.allCases)
    func concurrentReplays(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let ledger = storage.ledger
            let outcomes = try await concurrently(64) { index in
                var redemption = makeRedemption("2000000001", at: Double(index))
                redemption.redemptionId = "r-\(index)"
                redemption.grantHash = fakeHash("grant-\(index)")
                return try await ledger.insert(redemption, refusals: Self.refusals)
            }
            #expect(outcomes.count == 64)
            #expect(outcomes.compactMap(\.inserted).count == 1)
            #expect(outcomes.filter { $0 == .alreadyRedeemed }.count == 63)
            #expect(try await ledger.redemptions(AuditFilter()).count == 1)
            #expect(try await ledger.attempts(AuditFilter()).count == 63, "one refusal per replay")
        }
    }
}
