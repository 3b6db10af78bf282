import CofferApp
import CofferCore
import CofferStore
import CofferTestSupport
import Crypto
import Foundation
import GRDB
import Hummingbird
import HummingbirdTesting
import Testing

@testable import CofferServer

/// The tamper-evident ledger end to end: chained writes, signed checkpoints served over HTTP,
/// and `coffer ledger verify` catching each kind of tampering in a real database and in an
/// exported file.
@Suite struct LedgerTamperTests {
    /// A harness whose ledger holds its catalogue's 4 admin entries (1–4), then 3 redemptions and
    /// 2 refused replays (5–9), with a checkpoint signed every 2 entries (2, 4, 6, 8) and one at
    /// shutdown (9).
    static func populated() async throws -> Harness {
        let h = try await Harness.make(checkpointEvery: 2)
        try await h.app.test(.router) { client in
            for id in ["301", "302", "301", "303", "302"] {
                _ = try await client.execute(
                    uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["receipt": try Harness.receipt(id)]))
            }
        }
        return h
    }

    @Test func everyWriteIsChainedAndCheckpointsAreServed() async throws {
        let h = try await Self.populated()
        defer { h.cleanUp() }
        let report = try await h.services.ledger.audit(publicKey: h.services.ledgerSigner.publicKey)
        #expect(report.intact, "\(String(describing: report.problem))")
        #expect(report.entries == 9)
        #expect(report.checkpointsVerified == 5)
        try await h.app.test(.router) { client in
            let auditor = h.bearer(h.auditorKey)
            let keyResponse = try Harness.json(try await client.execute(uri: "/v1/audit/public-key", method: .get, headers: auditor))
            #expect(keyResponse["algorithm"] as? String == "Ed25519")
            let pemText = try #require(keyResponse["pem"] as? String)
            let key = try #require(LedgerKeys.parse(pemText))
            #expect(key.rawRepresentation == h.services.ledgerSigner.publicKey.rawRepresentation)

            let list = try Harness.json(try await client.execute(uri: "/v1/audit/checkpoints?limit=1", method: .get, headers: auditor))
            let first = try #require((list["items"] as? [[String: Any]])?.first)
            #expect(first["sequence"] as? Int == 2)
            #expect(list["nextCursor"] as? String == "2")
            let latestResponse = try await client.execute(uri: "/v1/audit/checkpoints/latest", method: .get, headers: auditor)
            let latest = try JSONDecoder().decode(LedgerCheckpoint.self, from: Data(latestResponse.body.readableBytesView))
            #expect(latest.sequence == 9, "signed when the server stopped")
            #expect(latest.isSigned(by: key))
            #expect(try await client.execute(uri: "/v1/audit/checkpoints", method: .get).status == .unauthorized)
            #expect(try await client.execute(uri: "/v1/audit/checkpoints?limit=0", method: .get, headers: auditor).status == .badRequest)
        }
        // The interval checkpoint signs a new head once, then has nothing to do.
        #expect(try await h.services.ledger.checkpointHead(now: Date()) == nil)
        for _ in 0..<2 {  // entries 10 (signed inline: every 2) and 11
            try await h.services.ledger.record(
                RejectedAttempt(
                    at: Date(), code: "signatureInvalid", detail: "d", transactionId: nil, productId: nil, receiptSHA256: "00", clientAddress: "x"))
        }
        #expect(try await h.services.ledger.checkpointHead(now: Date())?.sequence == 11)
        #expect(try await h.services.ledger.checkpointHead(now: Date()) == nil)
        #expect(try await h.services.ledger.checkpointHead(now: Date()) == nil)

        let empty = try await Harness.make()
        defer { empty.cleanUp() }
        try await empty.app.test(.router) { client in
            let none = try await client.execute(uri: "/v1/audit/checkpoints/latest", method: .get, headers: empty.bearer(empty.auditorKey))
            #expect(none.status == .notFound)
            #expect(Harness.code(none) == "noCheckpoint")
        }
    }

    @Test func theStorageRefusesUpdatesAndDeletes() async throws {
        let h = try await Self.populated()
        defer { h.cleanUp() }
        let queue = try DatabaseQueue(path: h.directory.appendingPathComponent("coffer.sqlite").path)
        for sql in [
            "UPDATE redemptions SET product_id = 'x'", "DELETE FROM redemptions", "UPDATE attempts SET code = 'x'", "DELETE FROM attempts",
            "UPDATE ledger_events SET entry_hash = entry_hash", "DELETE FROM ledger_events", "DELETE FROM ledger_checkpoints",
            "UPDATE ledger_checkpoints SET time = 0",
        ] {
            SignedKeyTests.expectRefused(sql, on: queue)
        }
        #expect(try await h.services.ledger.audit(publicKey: h.services.ledgerSigner.publicKey).intact)
    }

    /// Tampering by someone who can write the file (drops the triggers first).
    @Test func verifyCatchesTamperingInTheDatabase() async throws {
        func tampered(_ sql: String) async throws -> (LedgerAuditReport, CofferExecutable.Run) {
            let h = try await Self.populated()
            defer { h.cleanUp() }
            let queue = try DatabaseQueue(path: h.directory.appendingPathComponent("coffer.sqlite").path)
            try await queue.write { db in
                for trigger in try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'trigger'") {
                    try db.execute(sql: "DROP TRIGGER \(trigger)")
                }
                try db.execute(sql: sql)
            }
            let report = try await h.services.ledger.audit(publicKey: h.services.ledgerSigner.publicKey)
            return (report, try await CofferExecutable.run(["ledger", "verify", "--data-dir", h.directory.path]))
        }
        let intact = try await Self.populated()
        defer { intact.cleanUp() }
        let ok = try await CofferExecutable.run(["ledger", "verify", "--data-dir", intact.directory.path])
        #expect(ok.status == 0, "\(ok.stdout)")
        #expect(ok.stdout.contains("ledger intact"))

        // Entry 7 is the first refused replay (attempt row 1); entry 6 is redemption row 2.
        let edited = try await tampered("UPDATE redemptions SET product_id = 'com.coffer.demo.levelpack2' WHERE sequence = 2")
        #expect(edited.0.problem?.kind == .hashMismatch)
        #expect(edited.0.problem?.sequence == 6)
        #expect(edited.1.status == 1)
        #expect(edited.1.stdout.contains("first bad sequence: 6"), "\(edited.1.stdout)")

        let deleted = try await tampered("DELETE FROM attempts WHERE sequence = 1")
        #expect(deleted.0.problem?.kind == .rowMismatch)
        #expect(deleted.0.problem?.sequence == 7)
        #expect(deleted.1.status == 1)

        let deletedEvent = try await tampered("DELETE FROM attempts WHERE sequence = 1; DELETE FROM ledger_events WHERE sequence = 7")
        #expect(deletedEvent.0.problem?.kind == .sequenceBroken)
        #expect(deletedEvent.0.problem?.sequence == 7)

        let reordered = try await tampered(
            "UPDATE ledger_events SET sequence = 100 WHERE sequence = 1; UPDATE ledger_events SET sequence = 1 WHERE sequence = 2; UPDATE ledger_events SET sequence = 2 WHERE sequence = 100"
        )
        #expect(reordered.0.problem?.kind == .hashMismatch)
        #expect(reordered.0.problem?.sequence == 1)

        let truncated = try await tampered(
            "DELETE FROM ledger_events WHERE sequence >= 8; DELETE FROM attempts WHERE sequence = 2; DELETE FROM redemptions WHERE sequence = 3")
        #expect(truncated.0.problem?.kind == .truncated)
        #expect(truncated.0.problem?.sequence == 8)
        #expect(truncated.1.stdout.contains("first bad sequence: 8"), "\(truncated.1.stdout)")

        let inserted = try await tampered(
            "INSERT INTO redemptions (redemption_id, transaction_id, product_id, bundle_id, environment, quantity, receipt_sha256, source_format, redeemed_at, client_address, status, grant_hash) VALUES ('forged', '999', 'p', 'b', 'Sandbox', 1, 'x', 'appReceipt', 0, 'x', 'redeemed', 'g')"
        )
        #expect(inserted.0.problem?.kind == .rowMismatch)
        #expect(inserted.1.status == 1)
    }

    /// What the holder of the file can store that reads back as other text than SQL compares:
    /// GRDB reads TEXT and BLOB columns as C strings, so a BLOB `LocalTesting`, or the text
    /// with a U+0000 after it, hashes as the honest value — the chain still verifies — while
    /// the replay rule's `WHERE environment = ?` no longer finds the redemption and the same
    /// purchase is redeemed again. An event numbered below 1 is never walked by verify, yet
    /// "is this row chained?" found it. Verify names each; the rules ignore such events.
    @Test func valuesTheServerNeverWritesAreNamedByVerify() async throws {
        func tampered(_ sql: String) async throws -> (LedgerAuditReport, CofferExecutable.Run, Harness) {
            let h = try await Self.populated()
            let queue = try DatabaseQueue(path: h.directory.appendingPathComponent("coffer.sqlite").path)
            try await queue.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA ignore_check_constraints = ON")
                try db.inTransaction {
                    try db.execute(sql: "DROP TRIGGER redemptions_no_update")
                    try db.execute(sql: sql)
                    try db.execute(
                        sql:
                            "CREATE TRIGGER redemptions_no_update BEFORE UPDATE ON redemptions BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END"
                    )
                    return .commit
                }
            }
            try queue.close()
            let report = try await h.services.ledger.audit(publicKey: h.services.ledgerSigner.publicKey)
            return (report, try await CofferExecutable.run(["ledger", "verify", "--data-dir", h.directory.path]), h)
        }
        let blob = try await tampered("UPDATE redemptions SET environment = CAST(environment AS BLOB) WHERE sequence = 1")
        defer { blob.2.cleanUp() }
        #expect(blob.0.problem?.kind == .rowMismatch)
        #expect(blob.0.problem?.detail.contains("redemptions row 1: environment holds a blob value") == true, "\(String(describing: blob.0.problem))")
        #expect(blob.1.status == 1, "\(blob.1.stdout)")
        // Why it matters: the rule no longer sees the redemption (what verify now names).
        try await blob.2.app.test(.router) { client in
            let again = try await client.execute(
                uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["receipt": try Harness.receipt("301")]))
            #expect(again.status == .created)
        }

        let nul = try await tampered("UPDATE redemptions SET transaction_id = transaction_id || CAST(x'00' AS TEXT) WHERE sequence = 2")
        defer { nul.2.cleanUp() }
        #expect(nul.0.problem?.kind == .rowMismatch)
        #expect(
            nul.0.problem?.detail.contains("redemptions row 2: transaction_id holds text with a U+0000") == true,
            "\(String(describing: nul.0.problem))")
        #expect(nul.1.status == 1)

        let number = try await tampered("UPDATE redemptions SET quantity = '1x' WHERE sequence = 3")
        defer { number.2.cleanUp() }
        #expect(number.0.problem?.detail.contains("quantity holds a text value") == true, "\(String(describing: number.0.problem))")

        // A declared type edited (writable_schema): text bound in `WHERE transaction_id = ?`
        // becomes a number that never equals the text stored; the values all read back the same.
        let retyped = try await tampered(
            """
            PRAGMA writable_schema = ON;
            UPDATE sqlite_master SET sql = replace(sql, 'transaction_id TEXT NOT NULL', 'transaction_id INTEGER NOT NULL') WHERE name = 'redemptions';
            PRAGMA writable_schema = OFF;
            """)
        defer { retyped.2.cleanUp() }
        #expect(retyped.0.problem?.kind == .schemaAltered, "\(String(describing: retyped.0.problem))")
        #expect(retyped.0.problem?.detail.contains("redemptions is not as the migrations made it") == true)
        #expect(retyped.0.problem?.detail.contains("column transaction_id INTEGER") == true)
        #expect(retyped.1.status == 1)

        // A redemption with a grant of the forger's choosing, "chained" by an event at −1.
        let below = try await tampered(
            """
            INSERT INTO redemptions (redemption_id, transaction_id, product_id, bundle_id, environment, quantity, receipt_sha256,
              source_format, redeemed_at, client_address, status, grant_hash)
            VALUES ('forged', '999', 'com.coffer.demo.levelpack1', 'com.coffer.demo', 'LocalTesting', 1, '00', 'appReceipt', 0, 'x',
              'redeemed', 'chosen');
            INSERT INTO ledger_events (sequence, kind, row_sequence, entry_hash) VALUES (-1, 'redemption', last_insert_rowid(), printf('%064d', 0));
            """)
        defer { below.2.cleanUp() }
        #expect(below.0.problem?.kind == .sequenceBroken, "\(String(describing: below.0.problem))")
        #expect(below.0.problem?.detail.contains("numbered -1") == true)
        #expect(below.1.status == 1)
        #expect(try await below.2.services.ledger.redemption(grantHash: "chosen") == nil)
        #expect(try await below.2.services.ledger.unchainedRows().count == 1)
    }

    /// An export ends at the seal it read first: an entry appended behind the servers' backs
    /// (hashed right, never sealed) is not exported, and one added to a file after its last
    /// signature is `unsealed`. A line that mixes an entry's keys with a header's, or a second
    /// header, is unreadable (verify used to skip such lines, which other readers take for entries).
    @Test func anExportEndsAtASignature() async throws {
        let h = try await Self.populated()
        defer { h.cleanUp() }
        let key = h.services.ledgerSigner.publicKey
        // Entry 10, appended by a writer without the key: chained, hashed right, not sealed.
        let path = h.directory.appendingPathComponent("coffer.sqlite").path
        let unsigned = SQLiteLedger(try CofferDatabase(path: path))
        try await unsigned.record(
            RejectedAttempt(
                at: Date(), code: "malformedReceipt", detail: "forged", transactionId: nil, productId: nil, receiptSHA256: "00", clientAddress: "x"))
        let forged = try #require(try await unsigned.chainedEntries(after: 9, limit: 10).first)
        #expect(forged.entry.sequence == 10)

        var export = ""
        try await h.services.ledger.export(publicKey: key, now: Date()) { export += $0 }
        let lines = export.split(separator: "\n").map(String.init)
        #expect(lines.filter { $0.contains("\"entryHash\"") && !$0.contains("\"checkpoint\"") }.count == 9, "\(export)")
        #expect(LedgerExport.verify(Data(export.utf8), publicKey: key).intact)

        let appended = export + (try LedgerExport.entryLine(forged))
        let report = LedgerExport.verify(Data(appended.utf8), publicKey: key)
        #expect(report.problem?.kind == .unsealed, "\(String(describing: report.problem))")
        #expect(report.problem?.sequence == 10)
        #expect(try await h.services.ledger.audit(publicKey: key).problem?.kind == .unsealed)

        // Lines that are two things at once.
        let header: String = lines[0]
        let rest: [String] = Array(lines.dropFirst(2))
        let withFormat: String = String(lines[1].dropLast()) + ",\"format\":\"x\"}"
        let withNote: String = String(lines[1].dropLast()) + ",\"note\":1}"
        let cases: [([String], String)] = [
            ([header, withFormat] + rest, "line 2 is an entry line with other keys too (format)"),
            (lines + [header], "line \(lines.count + 1) is a second header"),
            ([header, withNote] + rest, "line 2 is an entry line with other keys too (note)"),
        ]
        for (bad, expected) in cases {
            let result = LedgerExport.verify(Data(bad.map { $0 + "\n" }.joined().utf8), publicKey: key)
            #expect(result.problem?.kind == .unreadable)
            #expect(result.problem?.detail.contains(expected) == true, "\(String(describing: result.problem))")
        }
    }

    /// The auditor's path: export over HTTP, verify offline with the key fetched earlier.
    @Test func verifyCatchesTamperingInAnExport() async throws {
        let h = try await Self.populated()
        defer { h.cleanUp() }
        let (exported, pem) = try await h.app.test(.router) { client in
            let auditor = h.bearer(h.auditorKey)
            let response = try await client.execute(uri: "/v1/audit/export?kind=ledger", method: .get, headers: auditor)
            #expect(response.status == .ok)
            let exported = String(decoding: response.body.readableBytesView, as: UTF8.self)
            let pem = try Harness.json(try await client.execute(uri: "/v1/audit/public-key", method: .get, headers: auditor))["pem"] as? String ?? ""
            #expect(try await client.execute(uri: "/v1/audit/export?kind=ledger&format=csv", method: .get, headers: auditor).status == .badRequest)
            return (exported, pem)
        }
        let dir = h.directory.appendingPathComponent("audit")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let keyFile = dir.appendingPathComponent("ledger.pub")
        try Data(pem.utf8).write(to: keyFile)
        var lines = exported.split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
        #expect(lines.count == 1 + 9 + 5, "header, 9 entries, 5 checkpoints")
        let header = lines.removeFirst()

        func verify(_ name: String, _ body: [String]) async throws -> CofferExecutable.Run {
            let file = dir.appendingPathComponent(name)
            try Data(([header] + body).map { $0 + "\n" }.joined().utf8).write(to: file)
            return try await CofferExecutable.run(["ledger", "verify", "--export", file.path, "--public-key", keyFile.path, "--json"])
        }
        func firstBad(_ run: CofferExecutable.Run) throws -> Int? {
            let object = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
            return (object["problem"] as? [String: Any])?["firstBadSequence"] as? Int
        }

        let ok = try await verify("intact.ndjson", lines)
        #expect(ok.status == 0, "\(ok.stdout)")
        #expect(ok.stdout.contains("\"checkpointsVerified\":5"))

        var edited = lines
        edited[2] = edited[2].replacingOccurrences(of: "\"clientAddress\":\"", with: "\"clientAddress\":\"1")
        #expect(edited[2] != lines[2])
        let e = try await verify("edited.ndjson", edited)
        #expect(e.status == 1)
        #expect(try firstBad(e) == 3)

        var deleted = lines
        deleted.remove(at: 1)
        let d = try await verify("deleted.ndjson", deleted)
        #expect(d.status == 1)
        #expect(try firstBad(d) == 2)

        var reordered = lines
        reordered.swapAt(3, 4)
        let r = try await verify("reordered.ndjson", reordered)
        #expect(r.status == 1)
        #expect(try firstBad(r) == 4)

        let truncated = Array(lines.prefix(2)) + Array(lines.suffix(5))
        let t = try await verify("truncated.ndjson", truncated)
        #expect(t.status == 1)
        #expect(try firstBad(t) == 3)
        #expect(t.stdout.contains("truncated"))

        // The right export checked against a key the auditor did not get from this server.
        let otherKey = dir.appendingPathComponent("other.pub")
        try Data(try LedgerKeys.pem(Curve25519.Signing.PrivateKey().publicKey).utf8).write(to: otherKey)
        let file = dir.appendingPathComponent("intact.ndjson")
        #expect(try await CofferExecutable.run(["ledger", "verify", "--export", file.path, "--public-key", otherKey.path]).status == 1)
        // Usage errors exit 2.
        #expect(try await CofferExecutable.run(["ledger", "verify"]).status == 2)
        #expect(try await CofferExecutable.run(["ledger", "verify", "--export", file.path, "--public-key", "nonsense"]).status == 2)

        // The CLI's own export of the same database verifies too.
        let cliExport = dir.appendingPathComponent("cli.ndjson")
        #expect(try await CofferExecutable.run(["ledger", "export", "--data-dir", h.directory.path, "--out", cliExport.path]).status == 0)
        #expect(
            try FileManager.default.attributesOfItem(atPath: cliExport.path)[.posixPermissions] as? Int == 0o600, "an export holds client addresses")
        // A device is never replaced by a file (standard output is the default).
        let device = try await CofferExecutable.run(["ledger", "export", "--data-dir", h.directory.path, "--out", "/dev/null"])
        #expect(device.status == 2 && device.stderr.contains("not a regular file"), "\(device.stderr)")
        let publicKey = try await CofferExecutable.run(["ledger", "public-key", "--data-dir", h.directory.path])
        #expect(publicKey.stdout == pem)
        #expect(try await CofferExecutable.run(["ledger", "verify", "--export", cliExport.path, "--public-key", keyFile.path]).status == 0)
    }

    /// Rows no event chains (a database from before the chain, or rows inserted behind the
    /// server's back) are never chained at start: the server refuses to open the data
    /// directory and names them; `coffer ledger adopt` chains them as a logged, chained event.
    @Test func unchainedRowsStopTheServerUntilAdopted() async throws {
        let h = try await Self.populated()
        defer { h.cleanUp() }
        let queue = try DatabaseQueue(path: h.directory.appendingPathComponent("coffer.sqlite").path)
        try await queue.write { db in
            try db.execute(sql: "DROP TRIGGER ledger_events_no_delete; DROP TRIGGER ledger_checkpoints_no_delete")
            // A database from before the chain: no events, no checkpoints, no seal; and one
            // asset (tiles) no longer held, though an admin row logged its upload.
            try db.execute(sql: "DELETE FROM ledger_events; DELETE FROM ledger_checkpoints; DELETE FROM ledger_head")
            try db.execute(sql: "DELETE FROM assets WHERE asset_id = 'tiles'")
            for table in ["ledger_events", "ledger_checkpoints"] {
                try db.execute(
                    sql: "CREATE TRIGGER \(table)_no_delete BEFORE DELETE ON \(table) BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END")
            }
        }
        #expect(try await h.services.ledger.audit(publicKey: nil).problem?.kind == .rowMismatch)
        var configuration = h.services.configuration
        configuration.checkpointEvery = 1000
        do {
            _ = try await SQLiteStorage.open(configuration, logger: .init(label: "test"))
            Issue.record("the server opened a ledger with unchained rows")
        } catch let error as LedgerStartupError {
            let text = error.description
            #expect(text.contains("redemption row 1") && text.contains("coffer ledger adopt"), "\(text)")
        }
        let adopted = try await CofferExecutable.run(["ledger", "adopt", "--data-dir", h.directory.path])
        #expect(adopted.status == 0)
        #expect(adopted.stdout.contains("3 redemption") && adopted.stdout.contains("2 attempt"), "\(adopted.stdout)")
        let reopened = try await SQLiteStorage.open(configuration, logger: .init(label: "test"))
        let report = try await reopened.ledger.audit(publicKey: reopened.ledgerSigner.publicKey)
        #expect(report.intact, "\(String(describing: report.problem))")
        // The nine rows, then — since catalogue entries adopted now back nothing unseen (one
        // inserted behind the server's back, under an honest admin's name, would) — an entry
        // vouching for each of the catalogue's 3 rows; then, the adopted rows replayed too, the
        // upload of tiles forgotten (its row is gone); then the adoption itself.
        #expect(adopted.stdout.contains("vouched for: product com.coffer.demo.levelpack1"), "\(adopted.stdout)")
        #expect(
            adopted.stdout.contains("vouched for the catalogue: 1 assetVersionRemoved, 1 assetVersionUnlogged, 2 productUnlogged"),
            "\(adopted.stdout)")
        #expect(report.entries == 9 + 4 + 1)
        let log = try await reopened.adminLog.actions(after: 0, limit: 20)
        #expect(
            log.map { "\($0.action) \($0.target)" }.suffix(5) == [
                "product.put com.coffer.demo.levelpack1", "product.put com.coffer.demo.levelpack2", "asset.upload level-1", "asset.forget tiles",
                "ledger.adopt ledger",
            ], "\(log.map(\.action))")
        #expect(try await reopened.ledger.unchainedRows().isEmpty)
    }

    /// An insider with the database file points the cheap level's row at other bytes: every
    /// request still works, but `coffer ledger verify` names the row the admin log does not
    /// back (exit 1), and only an operator's `coffer ledger adopt`, itself logged, clears it.
    @Test func aCatalogueChangedBehindTheServersBackIsNamedUntilAdopted() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let tiles = try #require(try await h.services.catalogue.asset("tiles"))
        let queue = try DatabaseQueue(path: h.directory.appendingPathComponent("coffer.sqlite").path)
        try await queue.write { db in try db.execute(sql: "UPDATE assets SET sha256 = ? WHERE asset_id = 'level-1'", arguments: [tiles.sha256]) }
        try queue.close()
        // The running server does not hand out the row: 503, and the purchase is not used up.
        let receipt = try Harness.receipt("9100")
        try await h.app.test(.router) { client async throws -> Void in
            let refused = try await client.execute(
                uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["receipt": receipt]))
            #expect(refused.status == .serviceUnavailable && Harness.code(refused) == "storageUnavailable", "\(refused.status)")
            #expect(refused.headers[.retryAfter] != nil)
            #expect(!String(buffer: refused.body).contains(tiles.sha256), "the client is not told what the row says")
        }
        #expect(try await h.services.ledger.redemptions(AuditFilter()).isEmpty)
        // Nor does a server start over it.
        let refusedStart = await #expect(throws: LedgerStartupError.self) {
            _ = try await SQLiteStorage.open(h.services.configuration, logger: .init(label: "test"))
        }
        #expect(
            "\(refusedStart.map { "\($0)" } ?? "")".contains(
                "assetVersionChanged: asset level-1 version 1 is version 1, 28 bytes, sha256 \(tiles.sha256)"))
        let named = try await CofferExecutable.run(["ledger", "verify", "--data-dir", h.directory.path])
        #expect(named.status == 1)
        #expect(named.stdout.hasPrefix("CATALOGUE NOT BACKED BY THE ADMIN LOG (the chain itself verifies)"), "\(named.stdout)")
        #expect(
            named.stdout.contains("catalogue: assetVersionChanged: asset level-1 version 1 is version 1, 28 bytes, sha256 \(tiles.sha256)"),
            "\(named.stdout)")
        let json = try await CofferExecutable.run(["ledger", "verify", "--data-dir", h.directory.path, "--json"])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        #expect(object["intact"] as? Bool == false)
        #expect((object["problem"] as? [String: Any])?["kind"] as? String == "catalogueUnbacked")
        let findings = try #require(object["catalogue"] as? [[String: Any]])
        #expect(findings.count == 1 && findings.first?["id"] as? String == "level-1" && findings.first?["version"] as? Int == 1, "\(findings)")
        #expect(findings.first?["entry"] as? Int == 1, "the upload's entry")

        // Not carried into PostgreSQL unnoticed: the copy refuses before it connects.
        let copy = try await CofferExecutable.run([
            "ledger", "copy", "--from-data-dir", h.directory.path, "--to-database", "postgres://nobody@127.0.0.1:1/none",
        ])
        #expect(copy.status == 1 && copy.stdout.contains("refused: the source ledger does not verify"), "\(copy.stdout)\(copy.stderr)")
        #expect(copy.stdout.contains("assetVersionChanged"), "\(copy.stdout)")

        let adopted = try await CofferExecutable.run(["ledger", "adopt", "--data-dir", h.directory.path])
        #expect(adopted.status == 0, "\(adopted.stdout)\(adopted.stderr)")
        #expect(adopted.stdout.contains("vouched for: asset level-1 version 1"), "\(adopted.stdout)")
        #expect(adopted.stdout.contains("vouched for the catalogue: 1 assetVersionChanged"), "\(adopted.stdout)")
        let afterwards = try await CofferExecutable.run(["ledger", "verify", "--data-dir", h.directory.path])
        #expect(afterwards.status == 0, "\(afterwards.stdout)")
        #expect(afterwards.stdout.contains("note: an operator adopted rows (ledger.adopt) at entry 7"), "\(afterwards.stdout)")
        let log = try await h.services.adminLog.actions(after: 0, limit: 10).dropFirst(Harness.catalogueActions.count)
        #expect(log.map { "\($0.action) \($0.target)" } == ["asset.forget level-1", "asset.upload level-1", "ledger.adopt ledger"])
        #expect(log.first?.detail.hasPrefix("version 1, 28 bytes, sha256 ") == true && log.first?.detail.contains(tiles.sha256) == false)
        // Vouched for: the running server serves the row as adopted, the same purchase redeems.
        try await h.app.test(.router) { client async throws -> Void in
            let redeemed = try await client.execute(
                uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["receipt": receipt]))
            #expect(redeemed.status == .created)
        }
        let reopened = try await SQLiteStorage.open(h.services.configuration, logger: .init(label: "test"))
        try await reopened.close()
    }

    /// `coffer keys create` / `revoke` against a running server's data directory: the key
    /// works at once, stops at once when revoked, and both changes are in the admin log.
    @Test func keysCreatedAndRevokedFromTheCLIAreLogged() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let created = try await CofferExecutable.run(["keys", "create", "--data-dir", h.directory.path, "--role", "auditor", "--name", "ci auditor"])
        #expect(created.status == 0)
        let key = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(key.hasPrefix("cof_auditor_") && !key.contains("\n"), "only the key on stdout")
        try await h.app.test(.router) { client async throws -> Void in
            #expect(try await client.execute(uri: "/v1/audit/attempts", method: .get, headers: h.bearer(key)).status == .ok)
            #expect(try await CofferExecutable.run(["keys", "revoke", "--data-dir", h.directory.path, "--key", key]).status == 0)
            #expect(try await client.execute(uri: "/v1/audit/attempts", method: .get, headers: h.bearer(key)).status == .unauthorized)
            #expect(try await CofferExecutable.run(["keys", "revoke", "--data-dir", h.directory.path, "--key", key]).status == 1, "already revoked")
        }
        let log = try await h.services.adminLog.actions(after: 0, limit: 10).dropFirst(Harness.catalogueActions.count)
        #expect(log.map(\.action) == ["key.create", "key.revoke"])
        #expect(log.allSatisfy { $0.target == "ci auditor" && $0.keyId == "cli" })
        #expect(Set(log.map(\.detail)).count == 1 && log.allSatisfy { $0.detail.hasPrefix("auditor key ") && $0.detail.count > 20 }, "\(log)")
    }
}
