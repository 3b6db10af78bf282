import CofferCore
import CofferTestSupport
import Foundation
import GRDB
import Testing

@testable import CofferStore

/// The Codable records of the chained tables store exactly the values the hand-written
/// mapping stored before them (the SQL below is that mapping's, verbatim): the chain hashes
/// what is read back, so a database written by either must verify under the other.
@Suite("Chained records")
struct ChainedRecordTests {
    static let at = Date(timeIntervalSince1970: 1_700_000_000.123456)

    static let revocations = [
        Revocation(
            redemptionId: "r-1", transactionId: "1001", revokedAt: at, reason: "REFUND", source: .notification, reference: "n-1",
            recordedAt: at.addingTimeInterval(0.5)),
        Revocation(
            redemptionId: "", transactionId: "1002", revokedAt: at, reason: "revoked by an admin", source: .admin, reference: "ops",
            recordedAt: at, environment: "Sandbox", replayKey: "1000"),
    ]

    static let action = AdminAction(
        at: at, keyId: "k-1", keyName: "ops", action: "key.create", target: "com.example.gems", detail: "d", clientAddress: "10.0.0.1")

    @Test("revocations, admin actions and checkpoints are stored as the hand-written SQL stored them")
    func recordsStoreTheSameValues() async throws {
        let checkpoint = try LedgerSigner(privateKey: .init()).checkpoint(sequence: 1, entryHash: fakeHash("head"), time: 1_700_000_000)
        let byHand = try await withDatabase { db in
            try await db.pool.write { db in
                for r in Self.revocations {
                    try db.execute(
                        sql: """
                            INSERT INTO revocations (redemption_id, transaction_id, revoked_at, reason, source, reference, recorded_at, environment, replay_key)
                            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                            """,
                        arguments: [
                            r.redemptionId, r.transactionId, r.revokedAt.timeIntervalSince1970, r.reason, r.source.rawValue, r.reference,
                            r.recordedAt.timeIntervalSince1970, r.environment, r.replayKey,
                        ])
                }
                let a = Self.action
                try db.execute(
                    sql: "INSERT INTO admin_actions (at, key_id, key_name, action, target, detail, client_address) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    arguments: [a.at.timeIntervalSince1970, a.keyId, a.keyName, a.action, a.target, a.detail, a.clientAddress])
                let c = checkpoint
                try db.execute(
                    sql: "INSERT INTO ledger_checkpoints (sequence, entry_hash, time, key_id, signature) VALUES (?, ?, ?, ?, ?)",
                    arguments: [c.sequence, c.entryHash, c.time, c.keyId, c.signature])
                return try Self.storedValues(db)
            }
        }
        let byRecords = try await withDatabase { db in
            try await db.pool.write { db in
                for (i, r) in Self.revocations.enumerated() {
                    #expect(
                        try ChainStore.insert(db, r)
                            == {
                                var stored = r; stored.sequence = Int64(i + 1); return stored
                            }())
                }
                var stored = Self.action
                stored.sequence = 1
                #expect(try ChainStore.insert(db, Self.action, policy: nil) == stored)
                try ChainStore.insert(db, checkpoint)
                #expect(try ChainStore.checkpoints(db, after: 0, limit: 10) == [checkpoint])
                return try Self.storedValues(db)
            }
        }
        #expect(byRecords == byHand)
        #expect(byHand.first?.contains("real \(Self.at.timeIntervalSince1970.bitPattern)") == true)
    }

    @Test("revocations and admin actions read back as they were written")
    func recordsReadBack() async throws {
        try await withDatabase { db in
            let ledger = SQLiteLedger(db)
            for r in Self.revocations { _ = try await ledger.revoke(r, keepUnredeemed: true) }
            let read = try await ledger.revocations(after: 0, limit: 10)
            #expect(read.map(\.revokedAt) == Self.revocations.map(\.revokedAt))
            #expect(read.map(\.recordedAt) == Self.revocations.map(\.recordedAt))
            #expect(read.map(\.environment) == [nil, "Sandbox"])
            let log = SQLiteAdminLog(db)
            try await log.record(Self.action)
            #expect(try await log.actions(after: 0, limit: 10).map(\.at) == [Self.at])
            #expect(try await ledger.audit(publicKey: nil).intact)
        }
    }

    /// Every value (sequence numbers included) of the three tables, exactly: its storage class
    /// and, for a REAL, its bit pattern.
    static func storedValues(_ db: Database) throws -> [[String]] {
        try ["revocations", "admin_actions", "ledger_checkpoints"].flatMap { table in
            try Row.fetchAll(db, sql: "SELECT * FROM \(table) ORDER BY sequence").map { row in
                row.databaseValues.map { value in
                    switch value.storage {
                    case .null: "null"
                    case .int64(let n): "integer \(n)"
                    case .double(let x): "real \(x.bitPattern)"
                    case .string(let text): "text \(text)"
                    case .blob(let data): "blob \(data.hexString)"
                    }
                }
            }
        }
    }
}
