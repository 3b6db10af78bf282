import CofferCore
import CofferTestSupport
import Foundation
import Testing

/// ``LedgerRepository``: the audit queries — filters, cursors and limits.
@Suite("Ledger contract: audit queries")
struct LedgerQueryContractTests {
    /// Six redemptions over three products, two bundles and two original transactions, one per minute.
    static let redemptions: [Redemption] = [
        makeRedemption("t1", original: "o1", product: "gems", bundle: "app.a", at: 0),
        makeRedemption("t2", original: "o1", product: "coins", bundle: "app.a", at: 60),
        makeRedemption("t3", original: nil, product: "gems", bundle: "app.b", at: 120),
        makeRedemption("t4", original: "o2", product: "pass", bundle: "app.a", at: 180),
        makeRedemption("t5", original: "o2", product: "gems", bundle: "app.b", at: 240),
        makeRedemption("t6", original: nil, product: "coins", bundle: "app.a", at: 300),
    ]

    /// Five attempts (sequences 1–5).
    static let attempts = [
        makeAttempt(code: "replay", transactionId: "t1", product: "gems", at: 0),
        makeAttempt(code: "badSignature", transactionId: nil, product: nil, at: 60),
        makeAttempt(code: "replay", transactionId: "t2", product: "coins", at: 120),
        makeAttempt(code: "wrongBundle", transactionId: "t3", product: "gems", at: 180),
        makeAttempt(code: "replay", transactionId: "t1", product: "gems", at: 240),
    ]

    /// A filter exercising every field, alone and combined, with what it selects of the
    /// redemptions (transaction ids) and of the attempts (sequences).
    struct Case: Sendable, CustomTestStringConvertible {
        var filter: AuditFilter
        var redemptions: [String]
        var attempts: [Int64]
        var testDescription: String { "\(filter)" }

        init(_ redemptions: [String], _ attempts: [Int64], _ change: (inout AuditFilter) -> Void = { _ in }) {
            var filter = AuditFilter()
            change(&filter)
            self.filter = filter
            self.redemptions = redemptions
            self.attempts = attempts
        }
    }

    static let all = ["t1", "t2", "t3", "t4", "t5", "t6"]

    static let cases: [Case] = [
        Case(all, [1, 2, 3, 4, 5]),
        Case(["t3"], [4]) { $0.transactionId = "t3" },
        Case([], []) { $0.transactionId = "missing" },
        Case(["t1", "t2"], [1, 2, 3, 4, 5], { $0.originalTransactionId = "o1" }),  // attempts have no original transaction
        Case(["t1", "t3", "t5"], [1, 4, 5]) { $0.productId = "gems" },
        Case(["t3", "t5"], [1, 2, 3, 4, 5], { $0.bundleId = "app.b" }),  // nor a bundle
        Case(all, [1, 3, 5], { $0.code = "replay" }),  // redemptions have no code
        Case(["t3", "t4", "t5", "t6"], [3, 4, 5]) { $0.from = instant(120) },
        Case(["t1", "t2"], [1, 2]) { $0.to = instant(120) },
        Case(["t2", "t3", "t4"], [2, 3, 4]) {
            $0.from = instant(60)
            $0.to = instant(240)
        },
        Case(["t3", "t4"], [3, 4]) {
            $0.from = instant(61)
            $0.to = instant(239)
        },
        Case(["t5"], [5]) {
            $0.productId = "gems"
            $0.bundleId = "app.b"
            $0.from = instant(200)
        },
        Case([], []) { $0.transactionId = "a2" },
        Case(["t1", "t3", "t5"], []) {
            $0.productId = "gems"
            $0.code = "badSignature"
        },
        Case(["t1"], [1, 5]) {
            $0.code = "replay"
            $0.transactionId = "t1"
        },
        Case([], [5]) {
            $0.code = "replay"
            $0.transactionId = "t1"
            $0.after = 1
        },
        Case(["t2", "t3"], [2, 3]) {
            $0.from = instant(60)
            $0.to = instant(180)
        },
        Case([], [1, 2, 3, 4, 5]) {
            $0.bundleId = "app.z"
            $0.originalTransactionId = "o9"
        },
        Case(["t3", "t4", "t5", "t6"], [3, 4, 5]) { $0.after = 2 },
        Case(["t3", "t4"], [3, 4]) {
            $0.after = 2
            $0.limit = 2
        },
        Case([], []) { $0.limit = 0 },
        Case([], []) { $0.limit = -1 },
        Case([], []) { $0.after = 100 },
        Case(["t6"], [3]) {
            $0.productId = "coins"
            $0.after = 2
            $0.limit = 1
        },
    ]

    @Test("redemption and attempt filters select what they say", arguments: Backend.allCases)
    func filters(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let ledger = storage.ledger
            for redemption in Self.redemptions { _ = try await ledger.insert(redemption) }
            for attempt in Self.attempts { try await ledger.record(attempt) }
            for c in Self.cases {
                #expect(try await ledger.redemptions(c.filter).map(\.transactionId) == c.redemptions, "\(c.filter)")
                #expect(try await ledger.attempts(c.filter).map(\.sequence) == c.attempts, "\(c.filter)")
            }
        }
    }

    /// instant(0) is 1_700_000_000 s: 2,400 s after the hour 472,222 began; 3,000 s is in the next hour.
    @Test("hourly counts: redemptions and refused attempts per UTC hour, in the range only", arguments: Backend.allCases)
    func hourlyCounts(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let ledger = storage.ledger
            for (i, at) in [0.0, 60, 1100, 3000, 9000].enumerated() {
                _ = try await ledger.insert(makeRedemption("h\(i)", original: nil, product: "gems", bundle: "app.a", at: at))
            }
            for at in [30.0, 3100, 3200] { try await ledger.record(makeAttempt(code: "alreadyRedeemed", transactionId: "h0", at: at)) }
            let hour = { (n: Int64) in Date(timeIntervalSince1970: Double(n) * 3600) }
            #expect(
                try await ledger.hourlyCounts(from: instant(-86400), to: instant(86400)) == [
                    HourlyCount(hour: hour(472_222), redemptions: 3, refused: 1), HourlyCount(hour: hour(472_223), redemptions: 1, refused: 2),
                    HourlyCount(hour: hour(472_224), redemptions: 1, refused: 0),
                ])
            // from inclusive, to exclusive.
            #expect(
                try await ledger.hourlyCounts(from: instant(60), to: instant(3100)) == [
                    HourlyCount(hour: hour(472_222), redemptions: 2, refused: 0), HourlyCount(hour: hour(472_223), redemptions: 1, refused: 0),
                ])
            #expect(try await ledger.hourlyCounts(from: instant(100_000), to: instant(200_000)).isEmpty)
        }
    }

    @Test("attempts are stored whole, in order, apart from redemptions", arguments: Backend.allCases)
    func attemptsRoundTrip(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let ledger = storage.ledger
            var claimed = makeAttempt(code: "signatureInvalid", transactionId: "t9", product: "gems", at: 1.5)
            claimed.claimed = true
            let sample = Self.attempts + [claimed]
            for attempt in sample { try await ledger.record(attempt) }
            let all = try await ledger.attempts(AuditFilter())
            #expect(all.map(\.sequence) == [1, 2, 3, 4, 5, 6])
            #expect(
                all.map {
                    var row = $0; row.sequence = 0; return row
                } == sample)
            #expect(try await ledger.redemptions(AuditFilter()).isEmpty, "attempts never touch the redemption ledger")
        }
    }

    @Test("cursor paging with after and limit walks the ledger once, in order", arguments: Backend.allCases)
    func cursorPaging(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let ledger = storage.ledger
            for redemption in Self.redemptions { _ = try await ledger.insert(redemption) }
            var filter = AuditFilter()
            filter.limit = 4
            var pages: [[String]] = []
            while true {
                let page = try await ledger.redemptions(filter)
                if page.isEmpty { break }
                pages.append(page.map(\.transactionId))
                filter.after = try #require(page.last).sequence
            }
            #expect(pages == [["t1", "t2", "t3", "t4"], ["t5", "t6"]])

            filter = AuditFilter()
            filter.productId = "gems"
            filter.limit = 1
            filter.after = 1
            let page = try await ledger.redemptions(filter)
            #expect(page.map(\.transactionId) == ["t3"])
            #expect(page.map(\.sequence) == [3])
        }
    }
}
