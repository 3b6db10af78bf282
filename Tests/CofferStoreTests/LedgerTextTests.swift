import CofferCore
import CofferTestSupport
import Foundation
import GRDB
import Testing

@testable import CofferStore

/// What is hashed is what is stored: random text (controls, NUL, combining marks, astral
/// planes, separators) round-trips through the store, the export and the verifier.
@Suite struct LedgerTextTests {
    /// A string of 0–40 scalars drawn from the awkward corners of Unicode.
    static func awkward(_ rng: inout SplitMix64) -> String {
        let pools: [ClosedRange<UInt32>] = [
            0x00...0x1F, 0x7F...0x9F, 0x20...0x7E, 0x300...0x36F,  // C0, DEL+C1, ASCII, combining marks
            0x2028...0x2029, 0xFFF0...0xFFFD, 0x1F600...0x1F64F, 0x10000...0x1000F, 0x10FFF0...0x10FFFF, 0xE9...0xE9,
            0x200B...0x200F, 0x202A...0x202E, 0x2060...0x206F, 0xFEFF...0xFEFF, 0x061C...0x061C, 0xFFF9...0xFFFB,  // format characters, bidi controls
        ]
        var out = String.UnicodeScalarView()
        for _ in 0..<Int.random(in: 0...40, using: &rng) {
            let pool = pools[Int.random(in: 0..<pools.count, using: &rng)]
            if let scalar = Unicode.Scalar(UInt32.random(in: pool, using: &rng)) { out.append(scalar) }
        }
        return String(out)
    }

    @Test func escapingIsIdempotentBoundedAndFreeOfControls() {
        var rng = SplitMix64(state: 0xC0FF_EE00)
        for _ in 0..<5_000 {
            let value = Self.awkward(&rng) + (Bool.random(using: &rng) ? String(repeating: "é", count: 80) : "")
            let escaped = LedgerText.escaped(value, maxBytes: 128)
            #expect(escaped.utf8.count <= 128)
            #expect(!escaped.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) || $0.value == 0xFFFD })
            #expect(LedgerText.escaped(escaped, maxBytes: 128) == escaped, "not idempotent for \(Array(value.unicodeScalars))")
            if LedgerText.isIdentifier(value) { #expect(escaped == value, "a valid identifier is stored as is") }
        }
        #expect(LedgerText.escaped("a\u{0}b", maxBytes: 64) == #"a\u{0}b"#)
        #expect(!LedgerText.isIdentifier("") && !LedgerText.isIdentifier("a\u{0}") && !LedgerText.isIdentifier(String(repeating: "1", count: 129)))
        #expect(LedgerText.isIdentifier("com.example.é🎮") && LedgerText.isIdentifier(String(repeating: "1", count: 128)))
    }

    /// A bidirectional override makes an auditor's screen show a claimed id in another order
    /// ("2000000123\u{202E}321" reads as another customer's id): never an identifier, always
    /// escaped; so are invisible characters. Joiners stay, in free text and identifiers (a
    /// player id may hold an emoji).
    @Test func bidiControlsAndInvisibleCharactersAreNeitherIdentifiersNorStoredRaw() {
        let bidi: [Unicode.Scalar] = [
            "\u{061C}", "\u{200E}", "\u{200F}", "\u{202A}", "\u{202B}", "\u{202C}", "\u{202D}", "\u{202E}", "\u{2066}", "\u{2069}",
        ]
        let invisible: [Unicode.Scalar] = [
            "\u{180E}", "\u{200B}", "\u{2060}", "\u{2063}", "\u{206A}", "\u{206F}", "\u{FEFF}", "\u{FFF9}", "\u{FFFB}",
        ]
        for scalar in bidi + invisible {
            let value = "2000000123" + String(scalar) + "321"
            #expect(!LedgerText.isIdentifier(value), "U+\(String(scalar.value, radix: 16))")
            #expect(LedgerText.escaped(value, maxBytes: 128) == "2000000123\\u{\(String(scalar.value, radix: 16, uppercase: true))}321")
        }
        let family = "👨\u{200D}👩\u{200D}👧"
        #expect(LedgerText.escaped("level " + family, maxBytes: 128) == "level " + family, "a joiner in free text is kept")
        #expect(LedgerText.isIdentifier("player-" + family), "and in an identifier")
    }

    /// Attempts and admin actions carrying random text, escaped as the vault and the admin log
    /// escape it — and, where SQLite can hold them, the raw strings too — read back equal and
    /// verify in the database and in the export.
    @Test(arguments: [UInt64(1), 2, 3, 0xDEAD_BEEF])
    func randomTextRoundTripsThroughStoreExportAndVerify(seed: UInt64) async throws {
        var rng = SplitMix64(state: seed)
        try await withDatabase { db in
            let signer = LedgerSigner(privateKey: .init())
            let ledger = SQLiteLedger(db, checkpoints: CheckpointPolicy(signer: signer, every: 7))
            let log = SQLiteAdminLog(db, checkpoints: CheckpointPolicy(signer: signer, every: 7))
            var written: [RejectedAttempt] = []
            for i in 0..<60 {
                let raw = Self.awkward(&rng)
                // Without NUL, SQLite stores and returns any string whole: those go in raw.
                let detail = raw.utf8.contains(0) ? LedgerText.escaped(raw, maxBytes: LedgerText.maxDetailBytes) : raw
                let attempt = RejectedAttempt(
                    at: instant(Double(i)), code: "signatureInvalid", detail: detail, transactionId: LedgerText.claimed(Self.awkward(&rng)),
                    productId: LedgerText.claimed(Self.awkward(&rng)), receiptSHA256: fakeHash("r"), clientAddress: "192.0.2.1", claimed: true)
                try await ledger.record(attempt)
                written.append(attempt)
                try await log.record(
                    AdminAction(
                        at: instant(Double(i)), keyId: "k", keyName: Self.awkward(&rng), action: "key.create", target: Self.awkward(&rng),
                        detail: Self.awkward(&rng), clientAddress: "192.0.2.1"))
            }
            var filter = AuditFilter()
            filter.limit = 1000
            let read = try await ledger.attempts(filter)
            #expect(read.map(\.detail) == written.map(\.detail))
            #expect(read.map(\.transactionId) == written.map(\.transactionId))
            let report = try await ledger.audit(publicKey: signer.publicKey)
            #expect(report.intact, "\(String(describing: report.problem))")
            #expect(report.entries == 120)
            var export = ""
            try await ledger.export(publicKey: signer.publicKey, now: Date()) { export += $0 }
            let offline = LedgerExport.verify(Data(export.utf8), publicKey: signer.publicKey)
            #expect(offline.intact, "\(String(describing: offline.problem))")
            #expect(offline.entries == 120 && offline.checkpointsVerified == report.checkpointsVerified)
        }
    }

    /// The store refuses a value holding U+0000 outright rather than hash it whole and store it cut.
    @Test func theStoreRefusesANulItWouldCut() async throws {
        try await withDatabase { db async throws -> Void in
            let ledger = SQLiteLedger(db)
            await #expect(throws: (any Error).self) {
                try await ledger.record(
                    RejectedAttempt(
                        at: instant(0), code: "x", detail: "a\u{0}b", transactionId: nil, productId: nil, receiptSHA256: fakeHash("r"),
                        clientAddress: "192.0.2.1"))
            }
            #expect(try await ledger.attempts(AuditFilter()).isEmpty)
            #expect(try await ledger.audit(publicKey: nil).intact)
        }
    }

    /// A database from before migration 0003 upgrades with every chained entry still matching;
    /// its admin log, never chained before, must be adopted.
    @Test func migration0003KeepsEveryHashAndAsksForTheAdminLogToBeAdopted() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir.appendingPathComponent("coffer.sqlite").path
            let queue = try DatabaseQueue(path: path)
            var migrator = DatabaseMigrator()
            for migration in EmbeddedMigrations.all.prefix(2) {
                let sql = migration.sql
                migrator.registerMigration(migration.name) { db in try db.execute(sql: sql) }
            }
            try migrator.migrate(queue)
            // Rows and chain events as a 0002 build wrote them (the canonical bytes of then).
            let redemption = makeRedemption("1001")
            let revocation = Revocation(
                redemptionId: redemption.redemptionId, transactionId: "1001", revokedAt: instant(5), reason: "REFUND", source: .notification,
                reference: "n-1", recordedAt: instant(5))
            try await queue.write { db in
                let r = redemption
                try db.execute(
                    sql: """
                        INSERT INTO redemptions (redemption_id, transaction_id, product_id, bundle_id, environment, quantity, receipt_sha256,
                          source_format, redeemed_at, client_address, status, grant_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [
                        r.redemptionId, r.transactionId, r.productId, r.bundleId, r.environment, r.quantity, r.receiptSHA256, r.sourceFormat.rawValue,
                        r.redeemedAt.timeIntervalSince1970, r.clientAddress, r.status, r.grantHash,
                    ])
                var stored = redemption
                stored.sequence = db.lastInsertedRowID
                try ChainStore.append(db, policy: nil, now: instant(0)) { .redemption(stored, sequence: $0) }
                var attempt = makeAttempt(code: "alreadyRedeemed", transactionId: "1001")
                try db.execute(
                    sql: """
                        INSERT INTO attempts (at, code, detail, transaction_id, product_id, receipt_sha256, client_address)
                        VALUES (?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [
                        attempt.at.timeIntervalSince1970, attempt.code, attempt.detail, attempt.transactionId, attempt.productId,
                        attempt.receiptSHA256,
                        attempt.clientAddress,
                    ])
                attempt.sequence = db.lastInsertedRowID
                try ChainStore.append(db, policy: nil, now: instant(0)) { .attempt(attempt, sequence: $0) }
                try db.execute(
                    sql: """
                        INSERT INTO revocations (redemption_id, transaction_id, revoked_at, reason, source, reference, recorded_at)
                        VALUES (?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [
                        revocation.redemptionId, revocation.transactionId, revocation.revokedAt.timeIntervalSince1970, revocation.reason,
                        revocation.source.rawValue, revocation.reference, revocation.recordedAt.timeIntervalSince1970,
                    ])
                var storedRevocation = revocation
                storedRevocation.sequence = db.lastInsertedRowID
                try ChainStore.append(db, policy: nil, now: instant(5)) { .revocation(storedRevocation, sequence: $0) }
                try db.execute(
                    sql:
                        "INSERT INTO admin_actions (at, key_id, key_name, action, target, detail, client_address) VALUES (1, 'k', 'n', 'a', 't', 'd', 'c')"
                )
                // A non-consumable restored before 0003: redeemed under its new transaction id 2001, then refunded.
                try db.execute(
                    sql: """
                        INSERT INTO redemptions (redemption_id, transaction_id, original_transaction_id, product_id, bundle_id, environment, quantity,
                          receipt_sha256, source_format, redeemed_at, client_address, status, grant_hash)
                        VALUES ('r-2001', '2001', '2000', 'com.example.gems', 'com.example.app', 'Sandbox', 1, 'x', 'signedTransaction', 6, 'c',
                          'redeemed', 'g-2001')
                        """)
                try db.execute(
                    sql: """
                        INSERT INTO revocations (redemption_id, transaction_id, revoked_at, reason, source, reference, recorded_at)
                        VALUES ('r-2001', '2001', 7, 'REFUND', 'notification', 'n-2', 7)
                        """)
            }
            try queue.close()

            let db = try CofferDatabase(path: path)
            let ledger = SQLiteLedger(db)
            let report = try await ledger.audit(publicKey: nil)
            #expect(report.entries == 3)
            #expect(report.problem?.kind == .rowMismatch, "rows outside the chain")
            #expect(try await ledger.unchainedRows().map(\.kind) == [.adminAction, .redemption, .revocation])
            // The old rows keep their place: replays and revocations still match them.
            #expect(try await ledger.insert(makeRedemption("1001")) == .alreadyRedeemed)
            #expect(try await ledger.revocation(of: redemption)?.reference == "n-1")
            // The restored purchase, now keyed by its original transaction id, is the same purchase,
            // and its old revocation (no environment, no key) still applies.
            var restored = makeRedemption("2002", original: "2000")
            restored.replayKey = "2000"
            #expect(try await ledger.insert(restored) == .alreadyRedeemed)
            #expect(try await ledger.revocation(of: restored)?.reference == "n-2")
            let adoption = try await ledger.adopt(
                by: AdminAction(at: instant(9), keyId: "cli", keyName: "operator", action: "", target: "", detail: "", clientAddress: "local"),
                now: instant(9))
            #expect(adoption.chained == [.adminAction: 1, .redemption: 1, .revocation: 1])
            let adopted = try await ledger.audit(publicKey: nil)
            #expect(adopted.intact, "\(String(describing: adopted.problem))")
            #expect(adopted.entries == 7)
            #expect(adopted.adoptions.count == 1)
        }
    }
}
