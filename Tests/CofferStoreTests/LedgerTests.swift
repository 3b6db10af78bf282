import CofferCore
import CofferTestSupport
import Foundation
import Testing

@testable import CofferStore

@Suite("SQLiteLedger")
struct LedgerTests {
    @Test("insert assigns a sequence; a replay is .alreadyRedeemed and adds no row")
    func insertAndReplay() async throws {
        try await withDatabase { db in
            let ledger = SQLiteLedger(db)
            let first = makeRedemption(
                "1000000001", original: "1000000000", purchaseDate: instant(-60.5), token: "8E2A1C4B-0000-4000-8000-000000000001")
            let outcome = try await ledger.insert(first)
            let row = try #require(outcome.inserted)
            #expect(row.sequence == 1)
            var expected = first
            expected.sequence = 1
            #expect(row == expected)

            var replay = makeRedemption("1000000001", at: 99)
            replay.redemptionId = "another-redemption"
            replay.grantHash = fakeHash("another-grant")
            #expect(try await ledger.insert(replay) == .alreadyRedeemed)
            #expect(try db.fetchInt(sql: "SELECT COUNT(*) FROM redemptions") == 1)

            // Every column round-trips.
            #expect(try await ledger.redemptions(AuditFilter()) == [expected])
            #expect(try await ledger.redemption(grantHash: first.grantHash) == expected)
            #expect(try await ledger.redemption(grantHash: replay.grantHash) == nil)

            let second = try #require(try await ledger.insert(makeRedemption("1000000002")).inserted)
            #expect(second.sequence == 2)
        }
    }

    @Test("64 concurrent inserts of one transaction id: exactly one is inserted")
    func concurrentReplays() async throws {
        try await withDatabase { db in
            let ledger = SQLiteLedger(db)
            let outcomes = try await withThrowingTaskGroup(of: LedgerInsertOutcome.self) { group in
                for index in 0..<64 {
                    group.addTask {
                        var redemption = makeRedemption("2000000001", at: Double(index))
                        redemption.redemptionId = "r-\(index)"
                        redemption.grantHash = fakeHash("grant-\(index)")
                        return try await ledger.insert(redemption)
                    }
                }
                var all: [LedgerInsertOutcome] = []
                for try await outcome in group { all.append(outcome) }
                return all
            }
            #expect(outcomes.count == 64)
            #expect(outcomes.compactMap(\.inserted).count == 1)
            #expect(outcomes.filter { $0 == .alreadyRedeemed }.count == 63)
            #expect(try db.fetchInt(sql: "SELECT COUNT(*) FROM redemptions") == 1)
        }
    }

    @Test("a unique collision on another column is an error, not a replay")
    func otherUniqueViolationPropagates() async throws {
        try await withDatabase { db in
            let ledger = SQLiteLedger(db)
            _ = try await ledger.insert(makeRedemption("3000000001"))
            var sameGrant = makeRedemption("3000000002")
            sameGrant.grantHash = makeRedemption("3000000001").grantHash
            await #expect(throws: (any Error).self) { _ = try await ledger.insert(sameGrant) }
            var sameRedemptionId = makeRedemption("3000000003")
            sameRedemptionId.redemptionId = "r-3000000001"
            await #expect(throws: (any Error).self) { _ = try await ledger.insert(sameRedemptionId) }
            #expect(try db.fetchInt(sql: "SELECT COUNT(*) FROM redemptions") == 1)
        }
    }

    /// Six redemptions over three products, two bundles and two original transactions, one per minute.
    static let sample: [Redemption] = [
        makeRedemption("t1", original: "o1", product: "gems", bundle: "app.a", at: 0),
        makeRedemption("t2", original: "o1", product: "coins", bundle: "app.a", at: 60),
        makeRedemption("t3", original: nil, product: "gems", bundle: "app.b", at: 120),
        makeRedemption("t4", original: "o2", product: "pass", bundle: "app.a", at: 180),
        makeRedemption("t5", original: "o2", product: "gems", bundle: "app.b", at: 240),
        makeRedemption("t6", original: nil, product: "coins", bundle: "app.a", at: 300),
    ]

    /// Filters exercising every field, alone and combined.
    static var filters: [AuditFilter] {
        var list: [AuditFilter] = [AuditFilter()]
        func add(_ change: (inout AuditFilter) -> Void) {
            var filter = AuditFilter()
            change(&filter)
            list.append(filter)
        }
        add { $0.transactionId = "t3" }
        add { $0.transactionId = "missing" }
        add { $0.originalTransactionId = "o1" }
        add { $0.productId = "gems" }
        add { $0.bundleId = "app.b" }
        add { $0.code = "replay" }
        add { $0.from = instant(120) }
        add { $0.to = instant(120) }
        add {
            $0.from = instant(60); $0.to = instant(240)
        }
        add {
            $0.from = instant(61); $0.to = instant(239)
        }
        add {
            $0.productId = "gems"; $0.bundleId = "app.b"; $0.from = instant(200)
        }
        add { $0.transactionId = "a2" }
        add {
            $0.productId = "gems"; $0.code = "badSignature"
        }
        add { $0.after = 2 }
        add {
            $0.after = 2; $0.limit = 2
        }
        add { $0.limit = 0 }
        add { $0.after = 100 }
        add {
            $0.productId = "coins"; $0.after = 2; $0.limit = 1
        }
        return list
    }

    @Test("redemption audit filters match the in-memory reference")
    func redemptionFilters() async throws {
        try await withDatabase { db in
            let ledger = SQLiteLedger(db)
            let reference = InMemoryLedger()
            for redemption in Self.sample {
                _ = try await ledger.insert(redemption)
                _ = try await reference.insert(redemption)
            }
            for filter in Self.filters {
                let expected = await reference.redemptions(filter)
                #expect(try await ledger.redemptions(filter) == expected, "\(filter)")
            }
            // Spot checks, so the comparison cannot pass with two empty results.
            var filter = AuditFilter()
            filter.productId = "gems"
            #expect(try await ledger.redemptions(filter).map(\.transactionId) == ["t1", "t3", "t5"])
            filter = AuditFilter()
            filter.originalTransactionId = "o2"
            #expect(try await ledger.redemptions(filter).map(\.transactionId) == ["t4", "t5"])
            filter = AuditFilter()
            filter.from = instant(60)
            filter.to = instant(240)
            #expect(try await ledger.redemptions(filter).map(\.transactionId) == ["t2", "t3", "t4"])
            filter = AuditFilter()
            filter.code = "anything"
            #expect(try await ledger.redemptions(filter).count == 6, "code applies to attempts only")
        }
    }

    @Test("cursor paging with after and limit walks the ledger once, in order")
    func cursorPaging() async throws {
        try await withDatabase { db in
            let ledger = SQLiteLedger(db)
            for redemption in Self.sample { _ = try await ledger.insert(redemption) }
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

    @Test("rejected attempts are recorded in order and filtered like the in-memory reference")
    func attempts() async throws {
        try await withDatabase { db in
            let ledger = SQLiteLedger(db)
            let reference = InMemoryLedger()
            let sample = [
                makeAttempt(code: "replay", transactionId: "t1", product: "gems", at: 0),
                makeAttempt(code: "badSignature", transactionId: nil, product: nil, at: 60),
                makeAttempt(code: "replay", transactionId: "t2", product: "coins", at: 120),
                makeAttempt(code: "wrongBundle", transactionId: "t3", product: "gems", at: 180),
                makeAttempt(code: "replay", transactionId: "t1", product: "gems", at: 240),
            ]
            for attempt in sample {
                try await ledger.record(attempt)
                await reference.record(attempt)
            }
            let all = try await ledger.attempts(AuditFilter())
            #expect(all.map(\.sequence) == [1, 2, 3, 4, 5])
            #expect(
                all.map {
                    var row = $0; row.sequence = 0; return row
                } == sample)

            for filter in Self.filters {
                let expected = await reference.attempts(filter)
                #expect(try await ledger.attempts(filter) == expected, "\(filter)")
            }
            var filter = AuditFilter()
            filter.code = "replay"
            #expect(try await ledger.attempts(filter).map(\.sequence) == [1, 3, 5])
            filter.transactionId = "t1"
            #expect(try await ledger.attempts(filter).map(\.sequence) == [1, 5])
            filter.after = 1
            #expect(try await ledger.attempts(filter).map(\.sequence) == [5])
            filter = AuditFilter()
            filter.from = instant(60)
            filter.to = instant(180)
            #expect(try await ledger.attempts(filter).map(\.code) == ["badSignature", "replay"])
            filter = AuditFilter()
            filter.bundleId = "app.z"
            filter.originalTransactionId = "o9"
            #expect(try await ledger.attempts(filter).count == 5, "bundle and original transaction apply to redemptions only")
            // Attempts never touch the redemption ledger.
            #expect(try await ledger.redemptions(AuditFilter()).isEmpty)
        }
    }
}
