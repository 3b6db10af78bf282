import CofferCore
import CofferTestSupport
import Crypto
import Foundation
import Testing

/// ``LedgerAuditRepository``: the hash chain every ledger write appends to, the signed
/// checkpoints, the seal, and the export auditors verify offline.
@Suite("Ledger audit contract")
struct LedgerAuditContractTests {
    /// A fixed key, so every run signs the same way.
    static let signer: LedgerSigner = {
        do { return LedgerSigner(privateKey: try .init(rawRepresentation: [UInt8](repeating: 7, count: 32))) } catch {
            fatalError("ledger key: \(error)")
        }
    }()

    /// One write of every kind, and writes that append nothing: 5 entries.
    static func writeOneOfEach(_ storage: ContractStorage) async throws {
        _ = try await storage.ledger.insert(makeRedemption("1"))
        try await storage.ledger.record(makeAttempt(code: "badSignature", transactionId: nil, at: 1))
        var replay = makeRedemption("1", at: 2)
        replay.redemptionId = "r-1-again"
        replay.grantHash = fakeHash("grant-1-again")
        _ = try await storage.ledger.insert(replay, refusals: LedgerContractTests.refusals)
        _ = try await storage.ledger.revoke(RevocationContractTests.revocation("1", at: 3), keepUnredeemed: false)
        try await storage.adminLog.record(AdminLogContractTests.action(4))
        // Refused: nothing appended.
        _ = try await storage.ledger.revoke(RevocationContractTests.revocation("1", at: 5), keepUnredeemed: false)
        _ = try await storage.ledger.revoke(RevocationContractTests.revocation("2", at: 5), keepUnredeemed: false)
    }

    /// An event numbered below 1 (the database owner dropped its CHECK): verify's walk from 1
    /// never reads it, so verify names it, and "is this row chained?" ignores it — the forged
    /// redemption it "chains" grants nothing. (SQLite: LedgerTamperTests.)
    /// An export's end must be under a signature: one whose checkpoint lines were stripped is
    /// `unsealed`, unless the auditor's pinned checkpoint (the seal, saved earlier) covers it.
    @Test("an export's last entries are vouched for by a pinned checkpoint too", arguments: Backend.allCases)
    func aPinnedCheckpointVouchesForAnExportsEnd(_ backend: Backend) async throws {
        try await backend.withStorage(signer: Self.signer) { storage in
            try await Self.writeOneOfEach(storage)
            let data = try await Self.export(storage.ledgerAudit, publicKey: Self.signer.publicKey)
            let seal = try #require(try await storage.ledgerAudit.sealedHead())
            let lines = String(decoding: data, as: UTF8.self).split(separator: "\n").filter { !$0.hasPrefix(#"{"checkpoint""#) }
            #expect(lines.count == 1 + 5)
            let stripped = Data((lines.joined(separator: "\n") + "\n").utf8)
            let bare = LedgerExport.verify(stripped, publicKey: Self.signer.publicKey)
            #expect(bare.problem?.kind == .unsealed && bare.problem?.sequence == 1, "\(String(describing: bare.problem))")
            let pinned = LedgerExport.verify(stripped, publicKey: Self.signer.publicKey, pinned: [seal])
            #expect(pinned.intact, "\(String(describing: pinned.problem))")
            #expect(pinned.pinnedVerified == 1)
        }
    }

    @Test("an event numbered below 1 is named by verify and chains nothing", arguments: [Backend.postgres])
    func anEventBelowOneChainsNothing(_ backend: Backend) async throws {
        try await backend.withStorage(signer: Self.signer) { storage in
            try await Self.writeOneOfEach(storage)
            let execute = try #require(storage.execute)
            try await execute(
                """
                ALTER TABLE ledger_events DROP CONSTRAINT ledger_events_sequence_check;
                INSERT INTO redemptions (sequence, redemption_id, transaction_id, product_id, bundle_id, environment, quantity,
                  receipt_sha256, source_format, redeemed_at, client_address, status, grant_hash, replay_key)
                SELECT max(sequence) + 1, 'forged', '999', 'p', 'b', 'Sandbox', 1, '00', 'appReceipt', 0, 'x', 'redeemed', 'chosen', '999'
                FROM redemptions;
                INSERT INTO ledger_events (sequence, kind, row_sequence, entry_hash)
                  SELECT 0, 'redemption', sequence, repeat('0', 64) FROM redemptions WHERE redemption_id = 'forged';
                """)
            #expect(try await storage.ledger.redemption(grantHash: "chosen") == nil)
            let report = try #require(try await storage.audit?(Self.signer.publicKey))
            #expect(report.problem?.kind == .sequenceBroken, "\(String(describing: report.problem))")
            #expect(report.problem?.detail.contains("an event numbered 0") == true)
        }
    }

    /// The export, as `GET /v1/audit/export?kind=ledger` streams it.
    static func export(_ audit: any LedgerAuditRepository, publicKey: Curve25519.Signing.PublicKey?) async throws -> Data {
        var text = ""
        try await audit.export(publicKey: publicKey, now: instant(1000)) { text += $0 }
        return Data(text.utf8)
    }

    @Test("every write appends one entry of its row, chained from the genesis hash", arguments: Backend.allCases)
    func chainGrowsPerWrite(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            #expect(try await storage.ledgerAudit.chainedEntries(after: 0, limit: 10).isEmpty)
            try await Self.writeOneOfEach(storage)
            let entries = try await storage.ledgerAudit.chainedEntries(after: 0, limit: 100)
            #expect(entries.map(\.entry.sequence) == [1, 2, 3, 4, 5])
            #expect(entries.map(\.entry.kind) == [.redemption, .attempt, .attempt, .revocation, .adminAction])
            var previous = LedgerChain.genesis
            for chained in entries {
                let hash = LedgerChain.hash(previous: previous, entry: chained.entry)
                #expect(hash.hexString == chained.entryHash, "entry \(chained.entry.sequence)")
                previous = hash
            }
            // Each entry is its row, as stored.
            let redemption = try #require(try await storage.ledger.redemptions(AuditFilter()).first)
            let attempts = try await storage.ledger.attempts(AuditFilter())
            let revocation = try #require(try await storage.ledger.revocations(after: 0, limit: 1).first)
            let action = try #require(try await storage.adminLog.actions(after: 0, limit: 1).first)
            #expect(
                entries.map(\.entry) == [
                    .redemption(redemption, sequence: 1), .attempt(attempts[0], sequence: 2), .attempt(attempts[1], sequence: 3),
                    .revocation(revocation, sequence: 4), .adminAction(action, sequence: 5),
                ])
            #expect(try await storage.ledgerAudit.chainedEntries(after: 3, limit: 1).map(\.entry.sequence) == [4])
            #expect(try await storage.ledgerAudit.chainedEntries(after: 5, limit: 10).isEmpty)
        }
    }

    @Test("checkpoints every N entries and on demand; the seal covers the head; the export verifies", arguments: Backend.allCases)
    func checkpointsSealAndExport(backend: Backend) async throws {
        try await backend.withStorage(signer: Self.signer, checkpointEvery: 2) { storage async throws in
            let audit = storage.ledgerAudit
            #expect(try await audit.checkpointHead(now: instant(0)) == nil, "nothing to sign yet")
            #expect(try await audit.sealedHead() == nil)
            try await Self.writeOneOfEach(storage)
            let entries = try await audit.chainedEntries(after: 0, limit: 100)
            let checkpoints = try await audit.checkpoints(after: 0, limit: 100)
            #expect(checkpoints.map(\.sequence) == [2, 4])
            #expect(checkpoints.map(\.entryHash) == [entries[1].entryHash, entries[3].entryHash])
            #expect(checkpoints.allSatisfy { $0.isSigned(by: Self.signer.publicKey) && $0.keyId == Self.signer.keyId })
            #expect(try await audit.latestCheckpoint() == checkpoints.last)
            #expect(try await audit.checkpoints(after: 2, limit: 1) == [checkpoints[1]])
            let seal = try #require(try await audit.sealedHead())
            #expect(seal.sequence == 5 && seal.entryHash == entries[4].entryHash && seal.isSigned(by: Self.signer.publicKey))
            try await audit.sealIntact()

            // The seal stands in for a checkpoint of the head.
            let sealed = LedgerExport.verify(try await Self.export(audit, publicKey: Self.signer.publicKey), publicKey: Self.signer.publicKey)
            #expect(sealed.intact, "\(String(describing: sealed.problem))")
            #expect(sealed.entries == 5 && sealed.checkpointsVerified == 3 && sealed.lastCheckpoint == 5)

            let head = try #require(try await audit.checkpointHead(now: instant(100)))
            #expect(head.sequence == 5 && head.entryHash == entries[4].entryHash && head.isSigned(by: Self.signer.publicKey))
            #expect(try await audit.checkpointHead(now: instant(101)) == nil, "a checkpoint already covers the head")
            #expect(try await audit.latestCheckpoint() == head)
            try await audit.sealIntact()

            let data = try await Self.export(audit, publicKey: Self.signer.publicKey)
            let report = LedgerExport.verify(data, publicKey: Self.signer.publicKey, pinned: [checkpoints[0]])
            #expect(report.intact, "\(String(describing: report.problem))")
            #expect(report.entries == 5 && report.checkpointsVerified == 3 && report.pinnedVerified == 1)
            #expect(report.headHash == entries[4].entryHash)
            let otherKey = Curve25519.Signing.PrivateKey().publicKey
            #expect(LedgerExport.verify(data, publicKey: otherKey).problem?.kind == .checkpointSignatureInvalid)
        }
    }

    @Test("without a signer: the chain only — no checkpoints, no seal", arguments: Backend.allCases)
    func unsigned(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let audit = storage.ledgerAudit
            try await Self.writeOneOfEach(storage)
            #expect(try await audit.checkpoints(after: 0, limit: 10).isEmpty)
            #expect(try await audit.latestCheckpoint() == nil)
            #expect(try await audit.sealedHead() == nil)
            #expect(try await audit.checkpointHead(now: instant(100)) == nil)
            try await audit.sealIntact()
            let report = LedgerExport.verify(try await Self.export(audit, publicKey: nil), publicKey: nil)
            #expect(report.intact, "\(String(describing: report.problem))")
            #expect(report.entries == 5 && report.checkpointsVerified == 0)
        }
    }

    @Test("concurrent writers extend one chain; the export pages past 500 entries and verifies", arguments: Backend.allCases)
    func concurrentWritersAndALongExport(backend: Backend) async throws {
        try await backend.withStorage(signer: Self.signer, checkpointEvery: 100) { storage async throws in
            let ledger = storage.ledger
            let log = storage.adminLog
            _ = try await concurrently(520) { index in
                if index % 10 == 0 {
                    try await log.record(AdminLogContractTests.action(index))
                } else {
                    try await ledger.record(makeAttempt(code: "replay", transactionId: "t\(index)", at: Double(index)))
                }
            }
            #expect(try await ledger.attempts(AuditFilter()).count == 100, "the default limit")
            #expect(try await storage.adminLog.actions(after: 0, limit: 1000).count == 52)
            #expect(try await storage.ledgerAudit.checkpoints(after: 0, limit: 10).map(\.sequence) == [100, 200, 300, 400, 500])
            try await storage.ledgerAudit.sealIntact()
            let report = LedgerExport.verify(
                try await Self.export(storage.ledgerAudit, publicKey: Self.signer.publicKey), publicKey: Self.signer.publicKey)
            #expect(report.intact, "\(String(describing: report.problem))")
            #expect(report.entries == 520 && report.lastSequence == 520 && report.checkpointsVerified == 6)
        }
    }
}
