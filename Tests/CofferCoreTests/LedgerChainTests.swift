import CofferCore
import Crypto
import Foundation
import Testing

/// The hash chain, checkpoints and the offline export, as an auditor would check them.
@Suite struct LedgerChainTests {
    static let at = Date(timeIntervalSince1970: 1_700_000_000.123456)

    static func attempt(_ row: Int64, code: String = "alreadyRedeemed") -> RejectedAttempt {
        RejectedAttempt(
            sequence: row, at: at, code: code, detail: "transaction \(row) was already redeemed", transactionId: String(row), productId: nil,
            receiptSHA256: String(repeating: "ab", count: 32), clientAddress: "203.0.113.9")
    }

    static func redemption(_ row: Int64) -> Redemption {
        Redemption(
            sequence: row, redemptionId: "r-\(row)", transactionId: "t-\(row)", originalTransactionId: nil, productId: "com.x.pack",
            bundleId: "com.x",
            environment: "Sandbox", purchaseDate: at, quantity: 1, receiptSHA256: String(repeating: "cd", count: 32), sourceFormat: .appReceipt,
            redeemedAt: at, clientAddress: "198.51.100.1", appAccountToken: nil, grantHash: String(repeating: "ef", count: 32))
    }

    /// `count` entries alternating redemptions and attempts, checkpoints every `every`.
    static func chain(_ count: Int64, every: Int64, signer: LedgerSigner) throws -> ([ChainedEntry], [LedgerCheckpoint]) {
        var previous = LedgerChain.genesis
        var entries: [ChainedEntry] = []
        var checkpoints: [LedgerCheckpoint] = []
        for sequence in 1...count {
            let entry =
                sequence % 2 == 1
                ? LedgerEntry.redemption(redemption(sequence), sequence: sequence) : LedgerEntry.attempt(attempt(sequence), sequence: sequence)
            previous = LedgerChain.hash(previous: previous, entry: entry)
            entries.append(ChainedEntry(entry: entry, entryHash: previous.hexString))
            if sequence % every == 0 {
                checkpoints.append(try signer.checkpoint(sequence: sequence, entryHash: previous.hexString, time: 1_700_000_000))
            }
        }
        return (entries, checkpoints)
    }

    static func audit(_ entries: [ChainedEntry], _ checkpoints: [LedgerCheckpoint], key: Curve25519.Signing.PublicKey?) -> LedgerAuditReport {
        var audit = LedgerAudit(checkpoints: checkpoints, publicKey: key)
        for e in entries { audit.add(e) }
        return audit.finish()
    }

    @Test("an entry numbered Int64.max (a row written into the database behind the server's back) is a broken sequence, never a trap")
    func aSequenceAtTheTopOfInt64IsReportedNotTrapped() throws {
        let signer = LedgerSigner(privateKey: .init())
        var (entries, checkpoints) = try Self.chain(4, every: 2, signer: signer)
        var previous = LedgerChain.genesis
        for e in entries { previous = LedgerChain.hash(previous: previous, entry: e.entry) }
        for _ in 0..<2 {
            let forged = LedgerEntry.attempt(Self.attempt(.max), sequence: .max)
            previous = LedgerChain.hash(previous: previous, entry: forged)
            entries.append(ChainedEntry(entry: forged, entryHash: previous.hexString))
        }
        checkpoints.append(try signer.checkpoint(sequence: .max, entryHash: String(repeating: "0", count: 64), time: 1_700_000_000))
        var audit = LedgerAudit(checkpoints: checkpoints, publicKey: signer.publicKey)
        for e in entries { audit.add(e) }
        audit.checkSeal(nil, last: .max)
        let report = audit.finish()
        #expect(report.problem?.kind == .sequenceBroken && report.problem?.sequence == 5, "\(String(describing: report.problem))")
        #expect(report.problem?.detail.contains("entries 5–9223372036854775806 are missing") == true)
    }

    @Test(
        "a time no clock gives, from a row written behind the server's back, is hashed as its own text, never trapping; the backends refuse reading one back"
    )
    func timesOutOfRangeNeverTrap() {
        #expect(LedgerEntry.micros(Self.at) == "1700000000123456")
        #expect(LedgerEntry.micros(Date(timeIntervalSince1970: -1.5)) == "-1500000")
        for seconds in [Double.nan, .infinity, -.infinity, 1e300, -9.3e12] {
            let text = LedgerEntry.micros(Date(timeIntervalSince1970: seconds))
            #expect(Int64(text) == nil, "\(seconds) hashed as \(text), which no honest time is")
            #expect(LedgerEntry.storedDate(seconds: seconds) == nil, "\(seconds)")
        }
        #expect(LedgerEntry.storedDate(seconds: 999_999_999_999) != nil)
        #expect(LedgerEntry.storedDate(seconds: -999_999_999_999) != nil)
        #expect(LedgerEntry.storedDate(seconds: 1e12) == nil)
    }

    @Test func canonicalBytesAndHashAreThoseTheREADMESpecifies() {
        var a = Self.attempt(7)
        a.detail = "transaction 1000 was already redeemed\n(é)"
        a.transactionId = "1000"
        let entry = LedgerEntry.attempt(a, sequence: 1)
        let expected =
            "coffer-ledger-v1\nsequence=1:1\nkind=7:attempt\nrow=1:7\nat=16:1700000000123456\ncode=15:alreadyRedeemed\n"
            + "detail=42:transaction 1000 was already redeemed\n(é)\ntransactionId=4:1000\nproductId~\n"
            + "receiptSHA256=64:\(String(repeating: "ab", count: 32))\nclientAddress=11:203.0.113.9\n"
        #expect(String(decoding: entry.canonicalBytes, as: UTF8.self) == expected)
        // Computed independently (Python hashlib over the same specification).
        #expect(
            LedgerChain.hash(previous: LedgerChain.genesis, entry: entry).hexString
                == "917df327b449adf57f7326f538d29d3292eb625ea37e886b6a08ab082f2b027c")
        // Length prefixes: moving bytes between adjacent fields changes the encoding.
        var shifted = a
        shifted.code = "alreadyRedeemed\ndetail=1:x"
        #expect(LedgerEntry.attempt(shifted, sequence: 1).canonicalBytes != entry.canonicalBytes)
    }

    @Test func intactChainVerifies() throws {
        let signer = LedgerSigner(privateKey: .init())
        let (entries, checkpoints) = try Self.chain(10, every: 4, signer: signer)
        let report = Self.audit(entries, checkpoints, key: signer.publicKey)
        #expect(report.intact, "\(String(describing: report.problem))")
        #expect(report.entries == 10)
        #expect(report.checkpointsVerified == 2)
        #expect(report.lastCheckpoint == 8)
        #expect(report.headHash == entries.last?.entryHash)
        #expect(Self.audit([], [], key: signer.publicKey).intact)
    }

    @Test func eachKindOfTamperingIsNamedAtItsFirstBadSequence() throws {
        let signer = LedgerSigner(privateKey: .init())
        let (entries, checkpoints) = try Self.chain(10, every: 4, signer: signer)
        func problem(_ e: [ChainedEntry], _ c: [LedgerCheckpoint] = checkpoints, key: Curve25519.Signing.PublicKey? = nil) -> LedgerProblem? {
            Self.audit(e, c, key: key ?? signer.publicKey).problem
        }
        // An edited field.
        var edited = entries
        edited[5].entry.values[1] = "codeChanged"
        #expect(problem(edited)?.kind == .hashMismatch)
        #expect(problem(edited)?.sequence == 6)
        // A deleted entry.
        var deleted = entries
        deleted.remove(at: 2)
        #expect(problem(deleted)?.kind == .sequenceBroken)
        #expect(problem(deleted)?.sequence == 3)
        // Reordered entries.
        var reordered = entries
        reordered.swapAt(6, 7)
        #expect(problem(reordered)?.kind == .sequenceBroken)
        #expect(problem(reordered)?.sequence == 7)
        // Reordered and renumbered: the hashes no longer chain.
        var renumbered = entries
        renumbered.swapAt(6, 7)
        renumbered[6].entry.sequence = 7
        renumbered[7].entry.sequence = 8
        #expect(problem(renumbered)?.kind == .hashMismatch)
        #expect(problem(renumbered)?.sequence == 7)
        // Truncation behind the last checkpoint (8): entries 7… removed.
        let truncated = Array(entries.prefix(6))
        #expect(problem(truncated)?.kind == .truncated)
        #expect(problem(truncated)?.sequence == 7)
        // Truncation after the last checkpoint is indistinguishable from a shorter ledger.
        #expect(problem(Array(entries.prefix(9))) == nil)
        // An edit with every later hash recomputed: only the signed checkpoint catches it.
        var rehashed = entries
        rehashed[5].entry.values[1] = "codeChanged"
        var previous = LedgerChain.genesis
        for i in rehashed.indices {
            previous = LedgerChain.hash(previous: previous, entry: rehashed[i].entry)
            rehashed[i].entryHash = previous.hexString
        }
        #expect(problem(rehashed)?.kind == .checkpointMismatch)
        #expect(problem(rehashed)?.sequence == 5, "the range after the last good checkpoint (4)")
        // A forged checkpoint, or the right checkpoints checked against another key.
        var forged = checkpoints
        forged[0].entryHash = rehashed[3].entryHash
        forged[0].time += 1
        #expect(problem(entries, forged)?.kind == .checkpointSignatureInvalid)
        #expect(problem(entries, forged)?.sequence == 4)
        #expect(problem(entries, key: LedgerSigner(privateKey: .init()).publicKey)?.kind == .checkpointSignatureInvalid)
    }

    @Test func exportRoundTripsAndCatchesTamperingOffline() throws {
        let signer = LedgerSigner(privateKey: .init())
        let (entries, checkpoints) = try Self.chain(6, every: 3, signer: signer)
        let header = try LedgerExport.headerLine(publicKey: signer.publicKey, exportedAt: Self.at)
        let lines = try entries.map(LedgerExport.entryLine) + checkpoints.map(LedgerExport.checkpointLine)
        func verify(_ lines: [String], key: Curve25519.Signing.PublicKey? = nil) -> LedgerAuditReport {
            LedgerExport.verify(Data((header + lines.joined()).utf8), publicKey: key ?? signer.publicKey)
        }
        let intact = verify(lines)
        #expect(intact.intact, "\(String(describing: intact.problem))")
        #expect(intact.checkpointsVerified == 2)
        // Edited field (the JSON value of one field of entry 2).
        var edited = lines
        edited[1] = edited[1].replacingOccurrences(of: "\"code\":\"alreadyRedeemed\"", with: "\"code\":\"revoked\"")
        #expect(edited[1] != lines[1])
        #expect(verify(edited).problem?.kind == .hashMismatch)
        #expect(verify(edited).problem?.sequence == 2)
        // Deleted line.
        var deleted = lines
        deleted.remove(at: 3)
        #expect(verify(deleted).problem?.sequence == 4)
        // Reordered lines.
        var reordered = lines
        reordered.swapAt(1, 2)
        #expect(verify(reordered).problem?.kind == .sequenceBroken)
        #expect(verify(reordered).problem?.sequence == 2)
        // Truncated behind the last checkpoint (entries 5, 6 gone, checkpoints kept).
        let truncated = Array(lines.prefix(4)) + Array(lines.suffix(2))
        #expect(verify(truncated).problem?.kind == .truncated)
        #expect(verify(truncated).problem?.sequence == 5)
        // A removed field and garbage are reported, never accepted.
        var missing = lines
        missing[0] = missing[0].replacingOccurrences(of: "\"appAccountToken\":null,", with: "")
        #expect(missing[0] != lines[0])
        #expect(verify(missing).problem?.kind == .unreadable)
        #expect(verify(lines + ["{not json\n"]).problem?.kind == .unreadable)
        // Checked against another key, the signatures fail.
        #expect(verify(lines, key: LedgerSigner(privateKey: .init()).publicKey).problem?.kind == .checkpointSignatureInvalid)
    }

    @Test func publicKeyFormatsParse() throws {
        let key = LedgerSigner(privateKey: .init()).publicKey
        let pem = try LedgerKeys.pem(key)
        #expect(pem.hasPrefix("-----BEGIN PUBLIC KEY-----"))
        #expect(LedgerKeys.parse(pem)?.rawRepresentation == key.rawRepresentation)
        #expect(LedgerKeys.parse(key.rawRepresentation.base64EncodedString())?.rawRepresentation == key.rawRepresentation)
        #expect(LedgerKeys.parse("{\"publicKey\":\"\(key.rawRepresentation.base64EncodedString())\"}")?.rawRepresentation == key.rawRepresentation)
        #expect(LedgerKeys.parse("not a key") == nil)
        #expect(LedgerKeys.parse(Data(repeating: 1, count: 31).base64EncodedString()) == nil)
    }

    @Test func aSealIsCheckedWhole_aValidSignatureOnAnotherHeadIsRefused() throws {
        let key = try Curve25519.Signing.PrivateKey(rawRepresentation: [UInt8](repeating: 3, count: 32))
        let policy = CheckpointPolicy(signer: LedgerSigner(privateKey: key))
        let head = String(repeating: "a", count: 64)
        let sealed = try policy.seal(headSequence: 5, headHash: head, now: Date(timeIntervalSince1970: 100))
        try policy.verifySeal(sealed, headSequence: 5, headHash: head, covering: nil)
        // An insider truncates the chain and moves the seal's numbers, keeping the signature this
        // process just wrote (and so remembers): refused, not waved through by the memo.
        var moved = sealed
        moved.sequence = 4
        moved.entryHash = String(repeating: "b", count: 64)
        #expect(throws: LedgerIntegrityError.self) { try policy.verifySeal(moved, headSequence: 4, headHash: moved.entryHash, covering: nil) }
        // Another instance's seal (the same key, another process): accepted.
        let other = CheckpointPolicy(signer: LedgerSigner(privateKey: key))
        let theirs = try other.seal(headSequence: 6, headHash: head, now: Date(timeIntervalSince1970: 101))
        try policy.verifySeal(theirs, headSequence: 6, headHash: head, covering: nil)
        // A seal by another key: refused.
        let stranger = try CheckpointPolicy(signer: LedgerSigner(privateKey: .init())).seal(headSequence: 7, headHash: head, now: Date())
        #expect(throws: LedgerIntegrityError.self) { try policy.verifySeal(stranger, headSequence: 7, headHash: head, covering: nil) }
    }
}
