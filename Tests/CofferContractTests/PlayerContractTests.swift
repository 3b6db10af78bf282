import CofferCore
import CofferTestSupport
import Crypto
import Foundation
import Testing

/// ``LedgerRepository`` and ``DeliveryRepository`` for players, subscriptions and the refund
/// lifecycle (migration 0004 / postgres 0003): the same behaviour on every backend.
@Suite("Ledger contract: players, purchase events, deliveries")
struct PlayerContractTests {
    static let signer = LedgerSigner(privateKey: .init())

    static func event(
        _ kind: PurchaseEvent.Kind, key: String = "500", at offset: Double, reference: String, source: PurchaseEvent.Source = .notification,
        expires: Date? = nil, grace: Date? = nil
    ) -> PurchaseEvent {
        PurchaseEvent(
            at: instant(offset), kind: kind, environment: "Sandbox", replayKey: key, redemptionId: "r-\(key)", transactionId: "t-\(offset)",
            playerId: "player-1", expiresAt: expires, graceUntil: grace, detail: "DID_RENEW", source: source, reference: reference)
    }

    @Test("a redemption keeps its player and end; lookups by environment and replay key, filters by player", arguments: Backend.allCases)
    func redemptionsCarryPlayerAndEnd(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let ledger = storage.ledger
            var bound = makeRedemption("500", original: "500")
            bound.replayKey = "500"
            bound.playerId = "player-1"
            bound.expiresAt = instant(3600)
            let stored = try #require(try await ledger.insert(bound).inserted)
            #expect(stored.playerId == "player-1" && stored.expiresAt == instant(3600))
            _ = try await ledger.insert(makeRedemption("501"))
            #expect(try await ledger.redemption(environment: "Sandbox", replayKey: "500") == stored)
            #expect(try await ledger.redemption(environment: "Production", replayKey: "500") == nil)
            #expect(try await ledger.redemption(environment: "Sandbox", replayKey: "5000") == nil)
            // A row from before replay keys (SQLite 0003): found by its original transaction id
            // too, on every backend (the in-memory ledger found it by its transaction id only).
            let older = try #require(try await ledger.insert(makeRedemption("503", original: "orig-503")).inserted)
            #expect(older.replayKey == nil)
            #expect(try await ledger.redemption(environment: "Sandbox", replayKey: "orig-503") == older)
            #expect(try await ledger.redemption(environment: "Sandbox", replayKey: "503") == older)
            var filter = AuditFilter()
            filter.playerId = "player-1"
            #expect(try await ledger.redemptions(filter) == [stored])
            filter.playerId = "player-2"
            #expect(try await ledger.redemptions(filter).isEmpty)
        }
    }

    @Test("purchase events are chained, listed per purchase and in order; a notification is recorded once", arguments: Backend.allCases)
    func purchaseEventsAreChainedAndDeduplicated(backend: Backend) async throws {
        try await backend.withStorage(signer: Self.signer, checkpointEvery: 2) { storage async throws in
            let ledger = storage.ledger
            _ = try await ledger.insert(makeRedemption("500"))
            let renew = Self.event(.subscriptionStatus, at: 10, reference: "n-1", expires: instant(7200))
            guard case .appended(let first) = try await ledger.append(renew) else {
                Issue.record("not appended")
                return
            }
            #expect(first.sequence == 1 && first.expiresAt == instant(7200) && first.playerId == "player-1")
            #expect(try await ledger.append(Self.event(.subscriptionStatus, at: 11, reference: "n-1")) == .duplicate)
            // A client event may share a reference (the redemption id): never deduplicated.
            _ = try await ledger.append(Self.event(.restore, at: 12, reference: "r-500", source: .client))
            _ = try await ledger.append(Self.event(.restore, at: 13, reference: "r-500", source: .client))
            _ = try await ledger.append(Self.event(.refundReversed, key: "other", at: 14, reference: "n-2", grace: instant(99)))
            let mine = try await ledger.purchaseEvents(environment: "Sandbox", replayKey: "500")
            #expect(mine.map(\.kind) == ["subscriptionStatus", "restore", "restore"])
            #expect(mine.map(\.sequence) == [1, 2, 3])
            #expect(try await ledger.purchaseEvents(environment: "Production", replayKey: "500").isEmpty)
            let all = try await ledger.purchaseEvents(after: 0, limit: 10)
            #expect(all.count == 4 && all.last?.graceUntil == instant(99))
            #expect(try await ledger.purchaseEvents(after: 3, limit: 10).map(\.sequence) == [4])

            let entries = try await storage.ledgerAudit.chainedEntries(after: 0, limit: 10)
            #expect(entries.map(\.entry.kind) == [.redemption, .purchaseEvent, .purchaseEvent, .purchaseEvent, .purchaseEvent])
            var text = ""
            try await storage.ledgerAudit.export(publicKey: Self.signer.publicKey, now: instant(100)) { text += $0 }
            let report = LedgerExport.verify(Data(text.utf8), publicKey: Self.signer.publicKey)
            #expect(report.intact && report.entries == 5, "\(String(describing: report.problem))")
        }
    }

    @Test("a control character in an event's text is escaped, never stored raw", arguments: Backend.allCases)
    func eventTextIsEscaped(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            var event = Self.event(.refundDeclined, at: 1, reference: "n-9")
            event.detail = "REFUND_DECLINED\u{0}\nforged"
            guard case .appended(let stored) = try await storage.ledger.append(event) else {
                Issue.record("not appended")
                return
            }
            #expect(!stored.detail.unicodeScalars.contains { $0.value < 0x20 })
            #expect(try await storage.ledger.purchaseEvents(after: 0, limit: 1).first?.detail == stored.detail)
        }
    }

    @Test("deliveries add up per redemption, asset and digest; listed in order and per redemption", arguments: Backend.allCases)
    func deliveriesAddUp(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let deliveries = storage.deliveries
            func report(_ redemption: String, _ asset: String, at offset: Double, sent: Int64, finished: Bool, whole: Bool) -> Delivery {
                Delivery(
                    redemptionId: redemption, assetId: asset, sha256: fakeHash(asset), firstAt: instant(offset), lastAt: instant(offset),
                    downloads: 1,
                    completed: finished ? 1 : 0, bytesServed: sent, complete: finished && whole)
            }
            try await deliveries.record([report("r-1", "level", at: 5, sent: 10, finished: false, whole: true)])
            try await deliveries.record([
                report("r-1", "level", at: 3, sent: 100, finished: true, whole: true),
                report("r-2", "level", at: 4, sent: 7, finished: true, whole: false),
                report("r-1", "level", at: 9, sent: 1, finished: true, whole: false),
            ])
            try await deliveries.record([])
            let all = try await deliveries.deliveries(redemptionId: nil, after: 0, limit: 10)
            #expect(all.map(\.redemptionId) == ["r-1", "r-2"])
            let first = try #require(all.first)
            #expect(first.downloads == 3 && first.completed == 2 && first.bytesServed == 111 && first.complete)
            #expect(first.firstAt == instant(3) && first.lastAt == instant(9))
            let second = try #require(all.last)
            #expect(second.downloads == 1 && second.completed == 1 && !second.complete)
            #expect(try await deliveries.deliveries(redemptionId: "r-2", after: 0, limit: 10) == [second])
            #expect(try await deliveries.deliveries(redemptionId: nil, after: first.sequence, limit: 10) == [second])
        }
    }

    @Test("products keep their type, family sharing and duration", arguments: Backend.allCases)
    func subscriptionProductsRoundTrip(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let pass = Product(
                productId: "season", bundleId: "com.example.app", type: .autoRenewable, assetIds: [], title: "Season", updatedAt: instant(0),
                familyShareable: true)
            let month = Product(
                productId: "month", bundleId: "com.example.app", type: .nonRenewing, assetIds: [], title: "Month", updatedAt: instant(0),
                durationSeconds: 2_592_000)
            try await storage.catalogue.putProduct(pass)
            try await storage.catalogue.putProduct(month)
            #expect(try await storage.catalogue.product("season") == pass)
            #expect(try await storage.catalogue.product("month") == month)
        }
    }
}
