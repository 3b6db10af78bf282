import CofferApp
import CofferCore
import CofferSandbox
import CofferStore
import CofferTestSupport
import Foundation
import GRDB
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

@testable import CofferServer

/// The hardening issue's attacks on the ledger and the vault's rules, each replayed.
@Suite struct LedgerHardeningTests {
    static func post(_ client: some TestClientProtocol, _ object: [String: Any]) async throws -> TestResponse {
        try await client.execute(uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(object))
    }

    /// An unsigned JWS (`alg: none`, no x5c) carrying `payload`.
    static func unsignedJWS(_ payload: String) -> String {
        Base64.encodeURL(Array(#"{"alg":"none"}"#.utf8)) + "." + Base64.encodeURL(Array(payload.utf8)) + "."
    }

    /// A transaction payload minted by the sandbox CA, edited, and signed again by it.
    static func signedTransaction(_ spec: TransactionSpec, edit: (inout [String: Any]) -> Void) throws -> String {
        let minted = try Harness.ca.mintTransaction(spec, now: Date())
        let parts = minted.split(separator: ".")
        let payload = try #require(Base64.decode(String(parts[1])))
        var object = try #require(try JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any])
        edit(&object)
        return try Harness.ca.signJWS(payload: Array(try JSONSerialization.data(withJSONObject: object)))
    }

    static func spec(
        _ transactionId: String, original: String? = nil, environment: CofferCore.Environment = .localTesting, appAccountToken: String? = nil
    ) -> TransactionSpec {
        var spec = TransactionSpec(bundleId: Harness.bundle, productId: Harness.product, transactionId: transactionId)
        spec.originalTransactionId = original
        spec.environment = environment
        spec.appAccountToken = appAccountToken
        return spec
    }

    static func audit(_ h: Harness) async throws -> LedgerAuditReport {
        try await h.services.ledger.audit(publicKey: h.services.ledgerSigner.publicKey)
    }

    // MARK: 1. A NUL never reaches the chain

    @Test func controlCharactersInIdentifiersNeverPoisonTheChain() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        try await h.app.test(.router) { client in
            // The client's own identifier: refused before anything is written.
            let nul = try await client.execute(
                uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders,
                body: ByteBuffer(string: #"{"receipt":"MAA=","transactionId":"a\u0000b"}"#))
            #expect(nul.status == .badRequest)
            #expect(Harness.code(nul) == "malformedRequest")
            #expect(try await h.services.ledger.attempts(AuditFilter()).isEmpty, "nothing written")

            // Unverified ids in an unsigned JWS: refused, recorded escaped and marked claimed.
            let unsigned = try await Self.post(
                client, ["signedTransaction": Self.unsignedJWS(#"{"transactionId":"a\u0000b\u001b[2J","productId":"p\u0000","bundleId":"b"}"#)])
            #expect(unsigned.status.code / 100 == 4)
            // Signed by a trusted (test) root, which can sign anything: still never stored raw.
            let signed = try await Self.post(
                client,
                [
                    "signedTransaction": try Harness.ca.mintTransaction(
                        TransactionSpec(bundleId: Harness.bundle, productId: Harness.product, transactionId: "9\u{0}1"), now: Date())
                ])
            #expect(signed.status == .unprocessableContent)
            #expect(Harness.code(signed) == "malformed")
            // Later entries still verify.
            #expect(try await Self.post(client, ["receipt": try Harness.receipt("9002")]).status == .created)
        }
        let attempts = try await h.services.ledger.attempts(AuditFilter())
        #expect(attempts.count == 2)
        #expect(attempts.allSatisfy { $0.claimed == true })
        #expect(attempts.first?.transactionId == #"a\u{0}b\u{1B}[2J"#)
        #expect(attempts.last?.transactionId == #"9\u{0}1"#)
        let report = try await Self.audit(h)
        #expect(report.intact, "\(String(describing: report.problem))")
        #expect(report.entries == 4 + 3, "the catalogue's 4, then 3")
        var export = ""
        try await h.services.ledger.export(publicKey: h.services.ledgerSigner.publicKey, now: Date()) { export += $0 }
        #expect(LedgerExport.verify(Data(export.utf8), publicKey: h.services.ledgerSigner.publicKey).intact)
    }

    // MARK: 3. Unauthenticated disk fill

    /// 1,000 refused JWS with 2 MB transaction ids grow the database by < 2 MB: claims are
    /// capped at 128 bytes.
    @Test func junkIdentifiersCannotFillTheDisk() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let path = h.directory.appendingPathComponent("coffer.sqlite").path
        func bytesUsed() throws -> Int {
            let queue = try DatabaseQueue(path: path)
            return try queue.read { db in
                let pages = try Int.fetchOne(db, sql: "PRAGMA page_count") ?? 0
                let free = try Int.fetchOne(db, sql: "PRAGMA freelist_count") ?? 0
                let size = try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 0
                return (pages - free) * size
            }
        }
        let before = try bytesUsed()
        let huge = String(repeating: "9", count: 2 * 1024 * 1024)
        let jws = Self.unsignedJWS(#"{"transactionId":"\#(huge)","productId":"\#(huge)","bundleId":"b"}"#)
        for _ in 0..<1000 {
            do {
                _ = try await h.vault.redeem(RedemptionRequest(proof: .signedTransaction(jws), clientAddress: "198.51.100.7"), now: Date())
                Issue.record("an unsigned JWS redeemed")
            } catch {
                #expect(error.status == 422 || error.status == 400)
            }
        }
        let grown = try bytesUsed() - before
        print("junkIdentifiersCannotFillTheDisk: 1,000 refusals grew the database by \(grown) bytes")
        #expect(grown < 2 * 1024 * 1024, "the database grew by \(grown) bytes")
        let attempts = try await h.services.ledger.attempts(AuditFilter())
        #expect(attempts.count == 100)  // one page of the default limit
        #expect(attempts.allSatisfy { ($0.transactionId?.utf8.count ?? 0) <= LedgerText.maxIdentifierBytes && $0.claimed == true })
    }

    // MARK: 2. A restart never launders tampering

    /// The issue's reproduction: with the server stopped, triggers dropped, a redemption deleted,
    /// another edited, every chain event and checkpoint deleted and a forged redemption inserted,
    /// the server refuses to start (it used to chain everything and sign fresh checkpoints).
    @Test func aRestartDoesNotChainTamperedRows() async throws {
        let h = try await LedgerTamperTests.populated()
        defer { h.cleanUp() }
        let publicKey = h.services.ledgerSigner.publicKey
        try h.services.database.close()
        let queue = try DatabaseQueue(path: h.directory.appendingPathComponent("coffer.sqlite").path)
        try await queue.write { db in
            for trigger in [
                "redemptions_no_delete", "redemptions_no_update", "ledger_events_no_delete", "ledger_checkpoints_no_delete",
            ] {
                try db.execute(sql: "DROP TRIGGER \(trigger)")
            }
            try db.execute(sql: "DELETE FROM redemptions WHERE transaction_id = '302'")
            try db.execute(sql: "UPDATE redemptions SET product_id = 'com.coffer.demo.levelpack2' WHERE transaction_id = '303'")
            try db.execute(sql: "DELETE FROM ledger_events; DELETE FROM ledger_checkpoints")
            try db.execute(
                sql: """
                    INSERT INTO redemptions (redemption_id, transaction_id, product_id, bundle_id, environment, quantity, receipt_sha256,
                      source_format, redeemed_at, client_address, status, grant_hash)
                    VALUES ('forged', '999', 'com.coffer.demo.levelpack1', 'com.coffer.demo', 'LocalTesting', 1, '00', 'appReceipt', 0, 'x',
                      'redeemed', 'known')
                    """)
        }
        try queue.close()
        await #expect(throws: LedgerStartupError.self) { _ = try await SQLiteStorage.open(h.services.configuration, logger: .init(label: "t")) }
        // Nothing was chained or signed by the refused start, and verify says so.
        let db = try CofferDatabase(readOnlyPath: h.directory.appendingPathComponent("coffer.sqlite").path)
        let report = try await SQLiteLedger(db).audit(publicKey: publicKey)
        #expect(!report.intact)
        #expect(report.entries == 0)
        #expect(report.problem?.kind == .truncated, "the seal still names entry 5")
    }

    /// What an attacker with the database file and the (public) chain algorithm can do: append
    /// a forged redemption and its correctly computed chain event.
    static func appendForgedRedemption(_ db: Database, transactionId: String) throws {
        let last = try Row.fetchOne(db, sql: "SELECT sequence, entry_hash FROM ledger_events ORDER BY sequence DESC LIMIT 1")
        let sequence: Int64 = (last?["sequence"] ?? 0) + 1
        let previousHex: String = last?["entry_hash"] ?? String(repeating: "0", count: 64)
        var previous: [UInt8] = []
        var index = previousHex.startIndex
        while index < previousHex.endIndex {
            let next = previousHex.index(index, offsetBy: 2)
            previous.append(UInt8(previousHex[index..<next], radix: 16) ?? 0)
            index = next
        }
        var forged = Redemption(
            redemptionId: "forged-\(transactionId)", transactionId: transactionId, originalTransactionId: nil, productId: Harness.product,
            bundleId: Harness.bundle, environment: "LocalTesting", purchaseDate: nil, quantity: 1, receiptSHA256: String(repeating: "0", count: 64),
            sourceFormat: .appReceipt, redeemedAt: Date(timeIntervalSince1970: 1_700_000_000), clientAddress: "203.0.113.9", appAccountToken: nil,
            grantHash: String(repeating: "a", count: 64), replayKey: transactionId)
        try db.execute(
            sql: """
                INSERT INTO redemptions (redemption_id, transaction_id, product_id, bundle_id, environment, quantity, receipt_sha256,
                  source_format, redeemed_at, client_address, status, grant_hash, replay_key) VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?)
                """,
            arguments: [
                forged.redemptionId, forged.transactionId, forged.productId, forged.bundleId, forged.environment, forged.receiptSHA256,
                forged.sourceFormat.rawValue, forged.redeemedAt.timeIntervalSince1970, forged.clientAddress, forged.status, forged.grantHash,
                forged.replayKey,
            ])
        forged.sequence = db.lastInsertedRowID
        let entry = LedgerEntry.redemption(forged, sequence: sequence)
        try db.execute(
            sql: "INSERT INTO ledger_events (sequence, kind, row_sequence, entry_hash) VALUES (?, 'redemption', ?, ?)",
            arguments: [sequence, forged.sequence, LedgerChain.hash(previous: previous, entry: entry).hexString])
    }

    /// The seal deleted, then an entry forged with a correctly computed hash (no key needed):
    /// verify names every entry no signature covers — from the last checkpoint on — as the
    /// server itself refuses to start on them.
    @Test func forgedAppendsAfterTheSealIsDeletedAreUnsealed() async throws {
        let h = try await LedgerTamperTests.populated()
        defer { h.cleanUp() }
        #expect(try await Self.audit(h).intact)
        try h.services.database.close()
        let queue = try DatabaseQueue(path: h.directory.appendingPathComponent("coffer.sqlite").path)
        try await queue.write { db in
            try db.execute(sql: "DELETE FROM ledger_head")
            try Self.appendForgedRedemption(db, transactionId: "666")
        }
        try queue.close()
        let db = try CofferDatabase(readOnlyPath: h.directory.appendingPathComponent("coffer.sqlite").path)
        let report = try await SQLiteLedger(db).audit(publicKey: h.services.ledgerSigner.publicKey)
        #expect(report.problem?.kind == .unsealed)
        #expect(
            report.problem?.sequence == 10,
            "the last checkpoint is at 9, the forged entry 10 under no signature: \(String(describing: report.problem))"
        )
        #expect(report.entries == 10)
        let verify = try await CofferExecutable.run(["ledger", "verify", "--data-dir", h.directory.path, "--json"])
        #expect(verify.status == 1 && verify.stdout.contains("\"unsealed\""), "\(verify.stdout)")
        #expect(verify.stdout.contains("entries 10–10 come after the last checkpoint"), "\(verify.stdout)")
        // The chain alone (no key: no checkpoints read) has nothing to say against it.
        let chainOnly = try await SQLiteLedger(db).audit(publicKey: nil)
        #expect(chainOnly.intact, "\(String(describing: chainOnly.problem))")
    }

    /// Forged entries appended with a correctly computed chain — while the server is stopped,
    /// or while it runs — are never extended or signed: the server only appends where its own
    /// key sealed the chain, and verify names the forged entries.
    @Test func forgedAppendsAreNeverSealed() async throws {
        let h = try await LedgerTamperTests.populated()
        defer { h.cleanUp() }
        let path = h.directory.appendingPathComponent("coffer.sqlite").path
        // While it runs: the next write is refused (503), nothing is chained on top.
        let queue = try DatabaseQueue(path: path)
        try await queue.write { db in try Self.appendForgedRedemption(db, transactionId: "666") }
        try await h.app.test(.router) { client in
            let refused = try await Self.post(client, ["receipt": try Harness.receipt("667")])
            #expect(refused.status == .serviceUnavailable)
            #expect(Harness.code(refused) == "storageUnavailable")
            let body = String(decoding: refused.body.readableBytesView, as: UTF8.self)
            #expect(!body.contains("appended") && !body.contains("seal"), "the client learns nothing of the ledger's state: \(body)")
            let ready = try await client.execute(uri: "/readyz", method: .get)
            #expect(ready.status == .serviceUnavailable)
            #expect(Harness.code(ready) == "ledgerSealBroken")
        }
        let report = try await Self.audit(h)
        #expect(report.problem?.kind == .unsealed)
        #expect(report.problem?.sequence == 10)
        #expect(report.entries == 10, "nothing appended after the forged entry")
        // Stopped and restarted: refused, naming the entries.
        try h.services.database.close()
        do {
            _ = try await SQLiteStorage.open(h.services.configuration, logger: .init(label: "t"))
            Issue.record("the server started on a chain it did not seal")
        } catch let error as LedgerStartupError {
            #expect(error.description.contains("entries 10–10 were appended"), "\(error)")
        }
        let verify = try await CofferExecutable.run(["ledger", "verify", "--data-dir", h.directory.path, "--json"])
        #expect(verify.status == 1 && verify.stdout.contains("\"unsealed\""), "\(verify.stdout)")
        // `adopt` does not seal over it silently: refused unless the operator says --reseal,
        // and then the old seal and the range are in the chain for auditors to see.
        let refusedAdopt = try await CofferExecutable.run(["ledger", "adopt", "--data-dir", h.directory.path])
        #expect(refusedAdopt.status == 1 && refusedAdopt.stdout.contains("--reseal"), "\(refusedAdopt.stdout)")
        #expect(try await CofferExecutable.run(["ledger", "adopt", "--data-dir", h.directory.path, "--reseal"]).status == 0)
        let afterwards = try await CofferExecutable.run(["ledger", "verify", "--data-dir", h.directory.path])
        #expect(afterwards.status == 0)
        #expect(afterwards.stdout.contains("note: an operator adopted rows (ledger.adopt) at entry 11"), "\(afterwards.stdout)")
        #expect(afterwards.stdout.contains("re-sealed over a broken seal"), "\(afterwards.stdout)")
        let reopened = try await SQLiteStorage.open(h.services.configuration, logger: .init(label: "t"))
        let adopted = try await reopened.ledger.audit(publicKey: reopened.ledgerSigner.publicKey)
        #expect(adopted.intact && adopted.entries == 11)
        #expect(try await reopened.adminLog.actions(after: 0, limit: 10).map(\.action) == Harness.catalogueActions + ["ledger.adopt"])
        try reopened.database.close()
    }

    /// Rows and schema objects changed behind the server's back grant nothing and are named:
    /// a grant in an unchained row, two redemptions of one purchase, a dropped unique index or trigger.
    @Test func tamperedRowsAndSchemaGrantNothingAndAreNamed() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let queue = try DatabaseQueue(path: h.directory.appendingPathComponent("coffer.sqlite").path)
        try await h.app.test(.router) { client in
            #expect(try await Self.post(client, ["receipt": try Harness.receipt("2000")]).status == .created)
            // A row with a grant the insider knows, no chain event: the grant is worthless.
            try await queue.write { db in
                try db.execute(
                    sql: """
                        INSERT INTO redemptions (redemption_id, transaction_id, product_id, bundle_id, environment, quantity, receipt_sha256,
                          source_format, redeemed_at, client_address, status, grant_hash, replay_key)
                        VALUES ('inside', '2999', 'com.coffer.demo.levelpack2', 'com.coffer.demo', 'LocalTesting', 1, '00', 'appReceipt', 0, 'x',
                          'redeemed', ?, '2999')
                        """, arguments: [Vault.grantHash("known-grant")])
            }
            let stolen = try await client.execute(
                uri: "/v1/grants/tokens", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["grant": "known-grant"]))
            #expect(stolen.status == .forbidden)
            #expect(Harness.code(stolen) == "grantInvalid")
            try await queue.write { db in
                try db.execute(sql: "DROP TRIGGER redemptions_no_delete")
                try db.execute(sql: "DELETE FROM redemptions WHERE redemption_id = 'inside'")
                // Unique index dropped, row 1 moved aside, the purchase redeemed again, row 1 put back.
                try db.execute(sql: "DROP TRIGGER redemptions_no_update; DROP INDEX redemptions_replay")
                try db.execute(sql: "UPDATE redemptions SET environment = 'Xcode' WHERE transaction_id = '2000'")
            }
            #expect(try await Self.post(client, ["receipt": try Harness.receipt("2000")]).status == .created)
            try await queue.write { db in
                try db.execute(sql: "UPDATE redemptions SET environment = 'LocalTesting' WHERE sequence = 1")
                try db.execute(sql: "CREATE INDEX redemptions_replay ON redemptions (environment, coalesce(replay_key, transaction_id))")
            }
        }
        let twice = try await Self.audit(h)
        #expect(twice.problem?.kind == .replayBroken, "\(String(describing: twice.problem))")
        #expect(twice.entries == 4 + 2, "the catalogue's 4, then 2")
    }

    /// A dropped append-only trigger is named by verify, and the server will not start on it.
    @Test func aDroppedTriggerIsNamedAndStopsTheServer() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let queue = try DatabaseQueue(path: h.directory.appendingPathComponent("coffer.sqlite").path)
        try await queue.write { db in try db.execute(sql: "DROP TRIGGER attempts_no_delete") }
        try queue.close()
        let altered = try await Self.audit(h)
        #expect(altered.problem?.kind == .schemaAltered)
        #expect(altered.problem?.detail.contains("attempts_no_delete") == true)
        try h.services.database.close()
        do {
            _ = try await SQLiteStorage.open(h.services.configuration, logger: .init(label: "t"))
            Issue.record("the server started on an altered schema")
        } catch let error as LedgerStartupError {
            #expect(error.description.contains("schema was altered"), "\(error)")
        }
    }

    /// Key changes need the server's ledger key: without it, nothing is created — no stray key
    /// that would sign what the server's key never saw, no key that the admin log does not show.
    @Test func keyChangesNeedTheServersLedgerKey() async throws {
        let keyPath = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-\(UUID().uuidString).key").path
        defer { try? FileManager.default.removeItem(atPath: keyPath) }
        _ = try LedgerKeyFile.create(at: keyPath)
        let h = try await Harness.make { $0.ledgerKeyFile = keyPath }
        defer { h.cleanUp() }
        let refused = try await CofferExecutable.run(["keys", "create", "--data-dir", h.directory.path, "--role", "admin", "--name", "mallory"])
        #expect(refused.status == 2)
        #expect(!FileManager.default.fileExists(atPath: LedgerKeyFile.path(dataDirectory: h.directory.path)), "no stray key")
        let created = try await CofferExecutable.run([
            "keys", "create", "--data-dir", h.directory.path, "--role", "admin", "--name", "alice", "--ledger-key", keyPath,
        ])
        #expect(created.status == 0)
        #expect(try await h.services.adminLog.actions(after: 0, limit: 10).dropFirst(Harness.catalogueActions.count).map(\.target) == ["alice"])
        #expect(try await Self.audit(h).intact)
    }

    /// `coffer keys create` while the server runs appends to the same chain and seals it with
    /// the same key: the server keeps writing.
    @Test func theCLISealsWhatItAppends() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        try await h.app.test(.router) { client in
            #expect(try await Self.post(client, ["receipt": try Harness.receipt("9200")]).status == .created)
            let created = try await CofferExecutable.run(["keys", "create", "--data-dir", h.directory.path, "--role", "auditor", "--name", "cli"])
            #expect(created.status == 0)
            #expect(try await Self.post(client, ["receipt": try Harness.receipt("9201")]).status == .created)
        }
        let report = try await Self.audit(h)
        #expect(report.intact, "\(String(describing: report.problem))")
        #expect(report.entries == 4 + 3, "the catalogue's 4, then 3")
    }

    // MARK: Pinned checkpoints, read-only verify, an external key

    /// Checkpoints an auditor saved keep catching history that was rewritten and re-signed
    /// with the (stolen) key, or truncated — where the ledger's own checkpoints cannot.
    @Test func pinnedCheckpointsCatchRewrittenAndTruncatedHistory() async throws {
        let h = try await LedgerTamperTests.populated()
        defer { h.cleanUp() }
        let saved = h.directory.deletingLastPathComponent().appendingPathComponent("pinned-\(UUID().uuidString).json")
        defer { try? FileManager.default.removeItem(at: saved) }
        try await h.app.test(.router) { client in
            let page = try await client.execute(uri: "/v1/audit/checkpoints", method: .get, headers: h.bearer(h.auditorKey))
            try Data(page.body.readableBytesView).write(to: saved)
        }
        let database = h.directory.appendingPathComponent("coffer.sqlite").path
        func checksum() -> [String] {
            ["", "-wal"].map { suffix in
                let data = FileManager.default.contents(atPath: database + suffix) ?? Data()
                return Array(data).sha256Hex
            }
        }
        let before = checksum()
        let intact = try await CofferExecutable.run(["ledger", "verify", "--data-dir", h.directory.path, "--checkpoint", saved.path])
        #expect(intact.status == 0)
        #expect(intact.stdout.contains("pinned checkpoints still extended: 5"), "\(intact.stdout)")
        #expect(checksum() == before, "verify wrote to the database it audits")

        // A thief with the database and the key rewrites history: a new ledger, new checkpoints, same key.
        let forged = try await Harness.make(checkpointEvery: 2) { configuration in
            configuration.ledgerKeyFile = LedgerKeyFile.path(dataDirectory: h.directory.path)
        }
        defer { forged.cleanUp() }
        try await forged.app.test(.router) { client in
            for id in ["301", "302", "303", "304", "305"] { _ = try await Self.post(client, ["receipt": try Harness.receipt(id)]) }
        }
        let forgedRun = [
            "ledger", "verify", "--data-dir", forged.directory.path, "--ledger-key", LedgerKeyFile.path(dataDirectory: h.directory.path),
        ]
        #expect(try await CofferExecutable.run(forgedRun).status == 0, "without pins the re-signed history looks intact")
        let caught = try await CofferExecutable.run(forgedRun + ["--checkpoint", saved.path])
        #expect(caught.status == 1)
        #expect(caught.stdout.contains("checkpointMismatch"), "\(caught.stdout)")

        // Truncated: the tail cut off after entry 7 (the catalogue's 4, redemptions 1 and 2,
        // attempt 1), its checkpoints with it. The seal still names the old head…
        let queue = try DatabaseQueue(path: database)
        try await queue.write { db in
            try db.execute(sql: "DROP TRIGGER ledger_events_no_delete; DROP TRIGGER ledger_checkpoints_no_delete")
            try db.execute(sql: "DELETE FROM ledger_events WHERE sequence > 7; DELETE FROM ledger_checkpoints WHERE sequence > 7")
            try db.execute(sql: "DROP TRIGGER attempts_no_delete; DROP TRIGGER redemptions_no_delete")
            try db.execute(sql: "DELETE FROM attempts WHERE sequence > 1; DELETE FROM redemptions WHERE sequence > 2")
        }
        let sealed = try await CofferExecutable.run(["ledger", "verify", "--data-dir", h.directory.path])
        #expect(sealed.status == 1 && sealed.stdout.contains("truncated"), "the seal covers the cut tail: \(sealed.stdout)")
        // …so the thief deletes the seal as well. Entry 7, after the last checkpoint (6), is now
        // under no signature: `unsealed` without pins; with them, the cut is named `truncated`.
        try await queue.write { db in try db.execute(sql: "DELETE FROM ledger_head") }
        let unsealed = try await CofferExecutable.run(["ledger", "verify", "--data-dir", h.directory.path])
        #expect(unsealed.status == 1 && unsealed.stdout.contains("unsealed"), "\(unsealed.stdout)")
        let named = try await CofferExecutable.run(["ledger", "verify", "--data-dir", h.directory.path, "--checkpoint", saved.path, "--json"])
        #expect(named.status == 1 && named.stdout.contains("\"truncated\""), "\(named.stdout)")
        // Cut exactly at the checkpoint (entry 7 and its attempt go too) and the triggers put
        // back: without pins nothing is left to tell.
        try await queue.write { db in
            try db.execute(sql: "DELETE FROM ledger_events WHERE sequence > 6; DELETE FROM attempts")
            for table in ["ledger_events", "ledger_checkpoints", "attempts", "redemptions"] {
                try db.execute(
                    sql: "CREATE TRIGGER \(table)_no_delete BEFORE DELETE ON \(table) BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END")
            }
        }
        try queue.close()
        let unpinned = try await CofferExecutable.run(["ledger", "verify", "--data-dir", h.directory.path])
        #expect(unpinned.status == 0, "a cut tail without its checkpoints and seal is invisible without pins: \(unpinned.stdout)")
        let truncated = try await CofferExecutable.run(["ledger", "verify", "--data-dir", h.directory.path, "--checkpoint", saved.path, "--json"])
        #expect(truncated.status == 1)
        #expect(truncated.stdout.contains("\"truncated\""), "\(truncated.stdout)")
        // Not a checkpoint file: a usage error.
        #expect(try await CofferExecutable.run(["ledger", "verify", "--data-dir", h.directory.path, "--checkpoint", database]).status == 2)
    }

    @Test(
        "a ledger put back to an older copy while stopped — an old backup, a failover that lost commits, an insider's restore — is refused at start: the data directory's high-water mark does not go back"
    )
    func aLedgerPutBackIsRefusedAtStart() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let configuration = h.services.configuration
        let data = DataDirectory(configuration.dataDirectory)
        var logger = Logger(label: "high-water")
        logger.logLevel = .critical
        func mark() throws -> LedgerHighWater? {
            try FileManager.default.contents(atPath: data.ledgerHighWater).map { try JSONDecoder().decode(LedgerHighWater.self, from: $0) }
        }
        try await h.app.test(.router) { client in
            let created = try await Self.post(client, ["receipt": try Harness.receipt("401")])
            #expect(created.status == .created)
        }
        try await h.services.close()
        // The thief's (or the old backup's) copy: one redemption.
        let backup = h.directory.appendingPathComponent("backup")
        try FileManager.default.createDirectory(at: backup, withIntermediateDirectories: true)
        let files = ["coffer.sqlite", "coffer.sqlite-wal", "coffer.sqlite-shm"]
        for name in files where FileManager.default.fileExists(atPath: h.directory.appendingPathComponent(name).path) {
            try FileManager.default.copyItem(at: h.directory.appendingPathComponent(name), to: backup.appendingPathComponent(name))
        }
        // Opened again: the mark is the seal as it stands; two more redemptions, and the
        // checkpoint service raises it.
        let reopened = try await SQLiteStorage.open(configuration, logger: logger)
        #expect(try mark()?.sequence == 5, "the catalogue's 4 entries and the redemption")
        for id in ["402", "403"] { _ = try await reopened.dependencies.ledger.insert(makeRedemption(id), refusals: nil) }
        let seal = try #require(try await reopened.dependencies.ledgerAudit.sealedHead())
        await CheckpointService(
            ledger: reopened.dependencies.ledgerAudit, interval: .seconds(60), logger: logger, highWater: reopened.dependencies.ledgerHighWater
        )
        .checkpoint()
        #expect(try mark()?.sequence == seal.sequence)
        #expect(try mark()?.entryHash == seal.entryHash)
        await reopened.finishWrites()
        try await reopened.close()

        // The copy put back: refused, naming what went back and what to do.
        for name in files {
            try? FileManager.default.removeItem(at: h.directory.appendingPathComponent(name))
            if FileManager.default.fileExists(atPath: backup.appendingPathComponent(name).path) {
                try FileManager.default.copyItem(at: backup.appendingPathComponent(name), to: h.directory.appendingPathComponent(name))
            }
        }
        do {
            let opened = try await SQLiteStorage.open(configuration, logger: logger)
            try await opened.close()
            Issue.record("a ledger rolled back from entry \(seal.sequence) to 5 was opened")
        } catch {
            #expect("\(error)".contains("the ledger ends before entry \(seal.sequence)"), "\(error)")
            #expect("\(error)".contains("delete \(data.ledgerHighWater)"), "\(error)")
        }
        #expect(try mark()?.sequence == seal.sequence, "a refused start leaves the mark")
        // A mark the ledger holds, with another entry there: rewritten.
        let rewritten = LedgerHighWater(sequence: 1, entryHash: String(repeating: "0", count: 64), seenAt: 1_700_000_000)
        try JSONEncoder().encode(rewritten).write(to: URL(fileURLWithPath: data.ledgerHighWater))
        await #expect(throws: LedgerStartupError.self) { _ = try await SQLiteStorage.open(configuration, logger: logger) }
        // Not a mark: refused until deleted. Deleted (the operator vouched for the ledger): it opens.
        try Data("junk".utf8).write(to: URL(fileURLWithPath: data.ledgerHighWater))
        await #expect(throws: LedgerStartupError.self) { _ = try await SQLiteStorage.open(configuration, logger: logger) }
        try FileManager.default.removeItem(atPath: data.ledgerHighWater)
        let accepted = try await SQLiteStorage.open(configuration, logger: logger)
        #expect(try mark()?.sequence == 5)
        try await accepted.close()
    }

    /// `ledger verify` never migrates: a database from an older schema is refused as such and left unchanged.
    @Test func verifyNeverMigratesTheDatabaseItAudits() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("coffer-old-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let path = dir.appendingPathComponent("coffer.sqlite").path
        var migrator = DatabaseMigrator()
        for migration in EmbeddedMigrations.all.prefix(2) {
            let sql = migration.sql
            migrator.registerMigration(migration.name) { db in try db.execute(sql: sql) }
        }
        let queue = try DatabaseQueue(path: path)
        try migrator.migrate(queue)
        try queue.close()
        _ = try LedgerKeyFile.signer(dataDirectory: dir.path)
        let run = try await CofferExecutable.run(["ledger", "verify", "--data-dir", dir.path])
        #expect(run.status == 2)
        let reopened = try DatabaseQueue(path: path)
        let applied = try await reopened.read { db in try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations ORDER BY identifier") }
        #expect(applied == ["0001_initial", "0002_ledger_chain"])
    }

    /// With `--ledger-key` the signing key never touches the data directory.
    @Test func theLedgerKeyCanLiveOutsideTheDataDirectory() async throws {
        let keyPath = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-\(UUID().uuidString).key").path
        defer { try? FileManager.default.removeItem(atPath: keyPath) }
        let keygen = try await CofferExecutable.run(["ledger", "keygen", "--out", keyPath])
        #expect(keygen.status == 0 && keygen.stdout.hasPrefix("-----BEGIN PUBLIC KEY-----"))
        #expect(try await CofferExecutable.run(["ledger", "keygen", "--out", keyPath]).status == 2, "never overwritten")
        let external = try LedgerKeyFile.load(keyPath)
        let h = try await Harness.make(checkpointEvery: 1) { $0.ledgerKeyFile = keyPath }
        defer { h.cleanUp() }
        #expect(h.services.ledgerSigner.keyId == external.keyId)
        try await h.app.test(.router) { client async throws -> Void in
            #expect(try await Self.post(client, ["receipt": try Harness.receipt("9100")]).status == .created)
        }
        #expect(!FileManager.default.fileExists(atPath: LedgerKeyFile.path(dataDirectory: h.directory.path)))
        let report = try await h.services.ledger.audit(publicKey: external.publicKey)
        #expect(report.intact && report.entries == 5 && report.checkpointsVerified == 5, "every entry signed: the catalogue's 4 and the redemption")
        // systemd credentials: picked up without a flag.
        let credentials = FileManager.default.temporaryDirectory.appendingPathComponent("creds-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: credentials) }
        try FileManager.default.createDirectory(at: credentials, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: keyPath, toPath: credentials.appendingPathComponent("ledger-signing.key").path)
        let resolved = try LedgerKeyFile.resolve(
            dataDirectory: h.directory.path, configured: nil, environment: ["CREDENTIALS_DIRECTORY": credentials.path], create: false)
        // Without the variable, the data directory's key (none here: it was never created).
        #expect(throws: (any Error).self) {
            _ = try LedgerKeyFile.resolve(dataDirectory: h.directory.path, configured: nil, environment: [:], create: false)
        }
        #expect(resolved.signer.keyId == external.keyId && !resolved.insideDataDirectory)
    }

    // MARK: The admin log is chained

    @Test func theAdminLogIsChainedAndVerified() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        try await h.app.test(.router) { client in
            let put = try await client.execute(
                uri: "/v1/admin/products/com.coffer.demo.extra", method: .put, headers: h.bearer(h.adminKey),
                body: try Harness.body(["bundleId": Harness.bundle, "type": "consumable", "assetIds": ["tiles"], "title": "Extra"]))
            #expect(put.status == .ok)
        }
        let events = try await h.services.ledger.events(after: 0, limit: 10)
        #expect(events.map(\.kind) == Array(repeating: .adminAction, count: Harness.catalogueActions.count + 1))
        #expect(try await Self.audit(h).intact)
        let queue = try DatabaseQueue(path: h.directory.appendingPathComponent("coffer.sqlite").path)
        try await queue.write { db in
            try db.execute(sql: "DROP TRIGGER admin_actions_no_update")
            try db.execute(sql: "UPDATE admin_actions SET key_name = 'someone else'")
        }
        let report = try await Self.audit(h)
        #expect(report.problem?.kind == .hashMismatch)
        #expect(report.problem?.sequence == 1)
    }

    // MARK: 4. Refunds before redemptions

    /// A quantity no ledger stores as given (PostgreSQL's integer; clamped, it would no longer
    /// match its hash) or no purchase has (0, negative) is refused: 422 `malformed`, and no
    /// redemption is stored. Apple's most, 10, is redeemed.
    @Test func quantitiesOutsideOneToAnIntegerAreRefused() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        try await h.app.test(.router) { client in
            for (id, quantity) in [("9301", Int(Int32.max) + 1), ("9302", 0), ("9303", -1), ("9304", Int.max)] {
                var spec = TransactionSpec(bundleId: Harness.bundle, productId: Harness.product, transactionId: id)
                spec.quantity = quantity
                let refused = try await Self.post(client, ["signedTransaction": try Harness.ca.mintTransaction(spec, now: Date())])
                #expect(refused.status.code == 422, "quantity \(quantity)")
                #expect(Harness.code(refused) == "malformed")
            }
            var ten = TransactionSpec(bundleId: Harness.bundle, productId: Harness.product, transactionId: "9305")
            ten.quantity = 10
            #expect(try await Self.post(client, ["signedTransaction": try Harness.ca.mintTransaction(ten, now: Date())]).status == .created)
        }
        #expect(try await h.services.ledger.redemptions(AuditFilter()).map(\.quantity) == [10])
        #expect(try await Self.audit(h).intact)
    }

    @Test func aRefundBeforeTheRedemptionIsKept() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let spec = TransactionSpec(bundleId: Harness.bundle, productId: Harness.product, transactionId: "5000")
        try await h.app.test(.router) { client in
            let refund = try await client.execute(
                uri: "/v1/notifications", method: .post, headers: Harness.jsonHeaders,
                body: try Harness.body(["signedPayload": try Harness.ca.mintNotification(type: "REFUND", transaction: spec, now: Date())]))
            #expect(try Harness.json(refund)["result"] as? String == "notRedeemed")
            // The captured transaction (signed before the refund, so it carries no revocationDate).
            let late = try await Self.post(client, ["signedTransaction": try Harness.ca.mintTransaction(spec, now: Date())])
            #expect(late.status == .gone)
            #expect(Harness.code(late) == "revoked")
            let again = try await client.execute(
                uri: "/v1/notifications", method: .post, headers: Harness.jsonHeaders,
                body: try Harness.body(["signedPayload": try Harness.ca.mintNotification(type: "REFUND", transaction: spec, now: Date())]))
            #expect(try Harness.json(again)["result"] as? String == "alreadyRevoked")
        }
        #expect(try await h.services.ledger.redemptions(AuditFilter()).isEmpty)
        #expect(try await h.services.ledger.attempts(AuditFilter()).map(\.code) == ["revoked"])
        let revocations = try await h.services.ledger.revocations(after: 0, limit: 10)
        #expect(revocations.count == 1 && revocations.first?.redemptionId == "" && revocations.first?.environment == "LocalTesting")
        #expect(try await Self.audit(h).intact)
    }

    /// A refund keyed by the type Apple signed, not the catalogue's of the moment: a season
    /// pass refunded before its product was catalogued (keyed then as a consumable, by its
    /// transaction id) still refuses the captured transaction once the product is added.
    @Test func aRefundBeforeTheProductIsCataloguedStillRefusesIt() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        var spec = TransactionSpec(bundleId: Harness.bundle, productId: "com.coffer.demo.season9", transactionId: "5100")
        spec.type = "Auto-Renewable Subscription"
        spec.originalTransactionId = "5100"
        spec.expiresDate = Date().addingTimeInterval(365 * 86400)
        let pass = spec
        try await h.app.test(.router) { client in
            let refund = try await client.execute(
                uri: "/v1/notifications", method: .post, headers: Harness.jsonHeaders,
                body: try Harness.body(["signedPayload": try Harness.ca.mintNotification(type: "REFUND", transaction: pass, now: Date())]))
            #expect(try Harness.json(refund)["result"] as? String == "notRedeemed")
            try await h.services.catalogue.putLoggedProduct(
                Product(
                    productId: pass.productId, bundleId: Harness.bundle, type: .autoRenewable, assetIds: ["level-1"], title: "Season 9",
                    updatedAt: Date()))
            let late = try await Self.post(client, ["signedTransaction": try Harness.ca.mintTransaction(pass, now: Date())])
            #expect(late.status == .gone, "\(String(decoding: late.body.readableBytesView, as: UTF8.self))")
            #expect(Harness.code(late) == "revoked")
        }
        #expect(try await h.services.ledger.redemptions(AuditFilter()).isEmpty)
    }

    // MARK: 5. Environments are separate key spaces

    @Test func environmentsDoNotShareReplayKeysOrRevocations() async throws {
        let anchor = try TrustAnchor.custom(Harness.ca.rootDER, environments: [.sandbox, .localTesting], requireAppleExtensions: true)
        let h = try await Harness.make { $0.anchors = [anchor] }
        defer { h.cleanUp() }
        let sandbox = Self.spec("6000", environment: .sandbox)
        let local = TransactionSpec(bundleId: Harness.bundle, productId: Harness.product, transactionId: "6000")
        try await h.app.test(.router) { client in
            let localRedeemed = try await Self.post(client, ["signedTransaction": try Harness.ca.mintTransaction(local, now: Date())])
            #expect(localRedeemed.status == .created)
            let grant = try #require(try Harness.json(localRedeemed)["grant"] as? String)
            // A Sandbox refund of the same id does not touch the LocalTesting redemption.
            let refund = try await client.execute(
                uri: "/v1/notifications", method: .post, headers: Harness.jsonHeaders,
                body: try Harness.body(["signedPayload": try Harness.ca.mintNotification(type: "REFUND", transaction: sandbox, now: Date())]))
            #expect(try Harness.json(refund)["result"] as? String == "notRedeemed")
            let exchange = try await client.execute(
                uri: "/v1/grants/tokens", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["grant": grant]))
            #expect(exchange.status == .ok)
            // The Sandbox purchase of that id is the refunded one; the LocalTesting one replays.
            #expect(try await Self.post(client, ["signedTransaction": try Harness.ca.mintTransaction(sandbox, now: Date())]).status == .gone)
            #expect(try await Self.post(client, ["signedTransaction": try Harness.ca.mintTransaction(local, now: Date())]).status == .conflict)
            // A fresh id redeems once in each environment.
            let sandbox2 = Self.spec("6001", environment: .sandbox)
            let local2 = Self.spec("6001")
            #expect(try await Self.post(client, ["signedTransaction": try Harness.ca.mintTransaction(sandbox2, now: Date())]).status == .created)
            #expect(try await Self.post(client, ["signedTransaction": try Harness.ca.mintTransaction(local2, now: Date())]).status == .created)
            // An admin revoking 6001 must say which one.
            func revoke(_ body: [String: Any]) async throws -> TestResponse {
                var headers = h.bearer(h.adminKey)
                headers[.contentType] = "application/json"
                return try await client.execute(uri: "/v1/admin/revocations", method: .post, headers: headers, body: try Harness.body(body))
            }
            let ambiguous = try await revoke(["transactionId": "6001", "reason": "chargeback"])
            #expect(ambiguous.status == .conflict)
            #expect(Harness.code(ambiguous) == "ambiguousTransaction")
            #expect(try await revoke(["transactionId": "6001", "reason": "chargeback", "environment": "Moon"]).status == .badRequest)
            let scoped = try await revoke(["transactionId": "6001", "reason": "chargeback", "environment": "Sandbox"])
            #expect(scoped.status == .created)
            #expect(try Harness.json(scoped)["environment"] as? String == "Sandbox")
        }
        #expect(try await Self.audit(h).intact)
    }

    // MARK: 7. The signed appAccountToken wins

    @Test func theSignedAppAccountTokenWins() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let token = "7D2F8D32-0000-4000-8000-000000000001"
        let spec = Self.spec("7100", appAccountToken: token)
        try await h.app.test(.router) { client in
            let jws = try Harness.ca.mintTransaction(spec, now: Date())
            let other = try await Self.post(client, ["signedTransaction": jws, "appAccountToken": "00000000-0000-4000-8000-000000000002"])
            #expect(other.status == .unprocessableContent)
            #expect(Harness.code(other) == "appAccountTokenMismatch")
            let legacy = try await Self.post(client, ["receipt": try Harness.receipt("7101"), "appAccountToken": token])
            #expect(Harness.code(legacy) == "appAccountTokenMismatch", "a legacy receipt carries no token to match")
            let notUUID = try await Self.post(client, ["signedTransaction": jws, "appAccountToken": "player-1"])
            #expect(notUUID.status == .badRequest)
            #expect(try await Self.post(client, ["signedTransaction": jws, "appAccountToken": token.lowercased()]).status == .created)
        }
        let rows = try await h.services.ledger.redemptions(AuditFilter())
        #expect(rows.map(\.appAccountToken) == [token])
    }

    // MARK: Product types, expired subscriptions, non-consumable restores

    @Test func productTypesMustMatchSubscriptionsIncluded() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        try await h.services.catalogue.putLoggedProduct(
            Product(
                productId: "com.coffer.demo.coins", bundleId: Harness.bundle, type: .consumable, assetIds: ["tiles"], title: "Coins",
                updatedAt: Date()))
        try await h.app.test(.router) { client in
            var consumable = TransactionSpec(bundleId: Harness.bundle, productId: Harness.product, transactionId: "7200")
            consumable.type = "Consumable"
            let mismatch = try await Self.post(client, ["signedTransaction": try Harness.ca.mintTransaction(consumable, now: Date())])
            #expect(mismatch.status == .unprocessableContent)
            #expect(Harness.code(mismatch) == "productTypeMismatch")

            let expired = try Self.signedTransaction(TransactionSpec(bundleId: Harness.bundle, productId: Harness.product, transactionId: "7201")) {
                $0["type"] = "Auto-Renewable Subscription"
                $0["expiresDate"] = (Date().timeIntervalSince1970 - 3600) * 1000
            }
            // A subscription (lapsed or not) is not the non-consumable the catalogue sells.
            let refusedExpired = try await Self.post(client, ["signedTransaction": expired])
            #expect(Harness.code(refusedExpired) == "productTypeMismatch")
            let live = try Self.signedTransaction(TransactionSpec(bundleId: Harness.bundle, productId: Harness.product, transactionId: "7202")) {
                $0["type"] = "Auto-Renewable Subscription"
                $0["expiresDate"] = (Date().timeIntervalSince1970 + 3600) * 1000
            }
            #expect(Harness.code(try await Self.post(client, ["signedTransaction": live])) == "productTypeMismatch")

            // Legacy receipts: subscription fields tell a subscription apart.
            var purchase = PurchaseSpec(productId: Harness.product, transactionId: "7203")
            purchase.expiresDate = Date().addingTimeInterval(-3600)
            let receipt = Data(try Harness.ca.mintReceipt(ReceiptSpec(bundleId: Harness.bundle, purchases: [purchase]), now: Date()))
            #expect(Harness.code(try await Self.post(client, ["receipt": receipt.base64EncodedString()])) == "productTypeMismatch")

            // Consumables: every transaction is a purchase, whatever its original transaction.
            var coins = TransactionSpec(bundleId: Harness.bundle, productId: "com.coffer.demo.coins", transactionId: "7301")
            coins.type = "Consumable"
            coins.originalTransactionId = "7300"
            #expect(try await Self.post(client, ["signedTransaction": try Harness.ca.mintTransaction(coins, now: Date())]).status == .created)
            coins.transactionId = "7302"
            #expect(try await Self.post(client, ["signedTransaction": try Harness.ca.mintTransaction(coins, now: Date())]).status == .created)
        }
        #expect(
            try await h.services.ledger.attempts(AuditFilter()).map(\.code) == [
                "productTypeMismatch", "productTypeMismatch", "productTypeMismatch", "productTypeMismatch",
            ])
    }

    /// A non-consumable restored on another device carries a new transaction id and the same
    /// original transaction id: the same purchase, redeemed once.
    @Test func nonConsumablesAreKeyedByTheirOriginalTransaction() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let first = Self.spec("7400", original: "7400")
        let restored = Self.spec("7411", original: "7400")
        try await h.app.test(.router) { client in
            #expect(try await Self.post(client, ["signedTransaction": try Harness.ca.mintTransaction(first, now: Date())]).status == .created)
            let replay = try await Self.post(client, ["signedTransaction": try Harness.ca.mintTransaction(restored, now: Date())])
            #expect(replay.status == .conflict)
            #expect(Harness.code(replay) == "alreadyRedeemed")
            // A legacy receipt of the restore (original 7400) is the same purchase too.
            var purchase = PurchaseSpec(productId: Harness.product, transactionId: "7412")
            purchase.originalTransactionId = "7400"
            let receipt = Data(try Harness.ca.mintReceipt(ReceiptSpec(bundleId: Harness.bundle, purchases: [purchase]), now: Date()))
            #expect(try await Self.post(client, ["receipt": receipt.base64EncodedString()]).status == .conflict)
        }
        let rows = try await h.services.ledger.redemptions(AuditFilter())
        #expect(rows.map(\.replayKey) == ["7400"])
        #expect(try await Self.audit(h).intact)
    }
}
