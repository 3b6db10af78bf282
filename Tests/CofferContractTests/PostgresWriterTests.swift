import CofferCore
import CofferTestSupport
import Foundation
import Logging
import Testing

@testable import CofferPostgres

/// The PostgreSQL backend's own edges, beyond the shared contract: the connection deadline
/// never answers "timed out" for a transaction that runs (it would commit a redemption whose
/// buyer got a 503), numbers the database hands out are checked, and a revocation copied from
/// an old SQLite ledger still counts.
@Suite("PostgreSQL backend edges")
struct PostgresWriterTests {
    /// A fresh, migrated database and a backend on it; closed afterwards.
    static func withBackend<T>(poolSize: Int = 2, _ body: (PostgresBackend, PostgresCluster, String) async throws -> T) async throws -> T {
        let cluster = try PostgresCluster.shared()
        let url = try cluster.createDatabase()
        let name = String(try #require(URLComponents(string: url)).path.dropFirst())
        let backend = try await PostgresBackend.open(try PostgresURL(url), poolSize: poolSize, timeouts: true, logger: Logger(label: "edges"))
        do {
            try await backend.migrate()
            let result = try await body(backend, cluster, name)
            await backend.close()
            return result
        } catch {
            await backend.close()
            throw error
        }
    }

    @Test("a transaction that outlasts the deadline once it has its connection commits and answers; one still waiting times out and runs nothing")
    func deadlineCoversTheWaitForAConnectionOnly() async throws {
        // One connection, made (and warm) by the migration; per-call deadlines of 2 s and 1 s
        // against a transaction holding it for 8 s: robust on a loaded machine.
        try await Self.withBackend(poolSize: 1) { backend, cluster, name in
            try cluster.psql("CREATE TABLE marks (id int)", database: name)
            async let slow: Int = backend.transaction(deadline: .seconds(2)) { c in
                try await c.query("SELECT pg_sleep(8)", logger: backend.logger)
                try await c.query("INSERT INTO marks VALUES (1)", logger: backend.logger)
                return 1
            }
            // Wait until the slow one holds the connection, then ask for another.
            var waited = 0
            while try cluster.psql(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%' AND state = 'active' AND datname = '\(name)'") == "0"
            {
                waited += 1
                try #require(waited < 300, "the slow transaction never started")
                try await Task.sleep(for: .milliseconds(10))
            }
            await #expect(throws: PostgresStoreError.self) {
                try await backend.transaction(deadline: .seconds(1)) { c in
                    try await c.query("INSERT INTO marks VALUES (2)", logger: backend.logger)
                }
            }
            #expect(try await slow == 1, "answered, not timed out")
            #expect(try cluster.psql("SELECT string_agg(id::text, ',') FROM marks", database: name) == "1", "the late one ran nothing")
        }
    }

    @Test("numbers from the database out of range are a storage error, never an overflow; the range is a constraint")
    func numbersAreChecked() async throws {
        try await Self.withBackend { backend, cluster, name in
            let insert = "INSERT INTO attempts (sequence, at, code, detail, receipt_sha256, client_address) VALUES"
            #expect(throws: (any Error).self) { try cluster.psql("\(insert) (9223372036854775806, 0, 'c', 'd', 'x', 'a')", database: name) }
            #expect(throws: (any Error).self) { try cluster.psql("\(insert) (0, 0, 'c', 'd', 'x', 'a')", database: name) }
            try cluster.psql("\(insert) (9007199254740991, 0, 'c', 'd', 'x', 'a')", database: name)
            let ledger = PostgresLedger(backend, checkpoints: nil)
            await #expect(throws: (any Error).self) { try await ledger.record(makeAttempt(code: "next", transactionId: "1")) }
            #expect(try await ledger.insert(makeRedemption("1")).inserted?.sequence == 1, "redemptions are numbered apart")
            #expect(throws: (any Error).self) { try PostgresLedgerWriterNumbers.numbers(from: Int64.max, count: 2, table: "attempts") }
            await ledger.finishWrites()
        }
    }

    @Test("a revocation copied from a SQLite ledger before its migration 0003 (no environment, no key) makes a refund alreadyRevoked")
    func legacyRevocationCounts() async throws {
        try await Self.withBackend { backend, cluster, name in
            let ledger = PostgresLedger(backend, checkpoints: nil)
            let redemption = try #require(try await ledger.insert(makeRedemption("700")).inserted)
            try cluster.psql(
                """
                INSERT INTO revocations (redemption_id, transaction_id, revoked_at, reason, source, reference, recorded_at)
                VALUES ('\(redemption.redemptionId)', '700', 0, 'REFUND', 'notification', 'old', 0)
                """, database: name)
            let refund = Revocation(
                redemptionId: "", transactionId: "700", revokedAt: instant(9), reason: "REFUND", source: .notification, reference: "n-700",
                recordedAt: instant(10), environment: "Sandbox", replayKey: "700")
            #expect(try await ledger.revoke(refund, keepUnredeemed: false) == .alreadyRevoked)
            #expect(try await ledger.revocation(of: redemption)?.reference == "old")
            await ledger.finishWrites()
        }
    }
}
