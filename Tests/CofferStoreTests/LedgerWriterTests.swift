import CofferCore
import CofferTestSupport
import Foundation
import Testing

@testable import CofferStore

/// The group-commit writer at shutdown: what was queued is committed, what comes after is
/// refused with a storage failure (503), never half-written.
@Suite("Ledger writer shutdown")
struct LedgerWriterTests {
    @Test func finishCommitsTheQueueAndRefusesLaterWrites() async throws {
        try await withDatabase { db in
            let ledger = SQLiteLedger(db)
            // Many writers at once, then finish while some are still queued.
            let outcomes = try await withThrowingTaskGroup(of: Bool.self) { group in
                for i in 0..<200 {
                    group.addTask {
                        do {
                            return try await ledger.insert(makeRedemption("t\(i)")).inserted != nil
                        } catch StoreError.closed {
                            return false
                        }
                    }
                }
                await ledger.finishWrites()
                var results: [Bool] = []
                for try await ok in group { results.append(ok) }
                return results
            }
            var all = AuditFilter()
            all.limit = 1000
            let committed = try await ledger.redemptions(all).count
            #expect(committed == outcomes.filter { $0 }.count, "every answered insert is committed, no other")
            await #expect(throws: StoreError.closed) { _ = try await ledger.insert(makeRedemption("late")) }
            await #expect(throws: StoreError.closed) { try await ledger.record(makeAttempt(code: "x", transactionId: "late")) }
            let closed: any Error = StoreError.closed
            #expect(closed is any StorageFailure)
            // Finishing twice is harmless.
            await ledger.finishWrites()
        }
    }
}
