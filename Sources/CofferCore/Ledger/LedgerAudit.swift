import Crypto
import Foundation

/// What is wrong with a ledger, and where it first goes wrong.
public struct LedgerProblem: Sendable, Hashable, CustomStringConvertible {
    public enum Kind: String, Sendable, Hashable {
        /// A sequence number is missing, repeated or out of order (a deleted or reordered entry).
        case sequenceBroken
        /// An entry's fields do not hash to its recorded hash (an edited entry).
        case hashMismatch
        /// The chain up to a signed checkpoint does not reach the signed hash (entries edited
        /// and rehashed, or replaced).
        case checkpointMismatch
        /// A checkpoint whose signature is not from the expected key.
        case checkpointSignatureInvalid
        /// The ledger ends before a signed checkpoint (entries cut off the end).
        case truncated
        /// An entry whose row is gone, or a row no entry chains (a deleted or inserted row).
        case rowMismatch
        /// Entries after the head the server last sealed with its key: appended behind its back.
        case unsealed
        /// One purchase redeemed more than once (the replay rule was bypassed in the database).
        case replayBroken
        /// An append-only trigger or a unique index of the replay rule is missing or altered.
        case schemaAltered
        /// The export or database cannot be read as a ledger.
        case unreadable
        /// A product or asset version that the chained admin log does not back: changed behind
        /// the server's back, or from before Coffer logged every change (``CatalogueAudit``).
        case catalogueUnbacked
    }

    public var kind: Kind
    /// The first sequence number that cannot be trusted (nil when none applies).
    public var sequence: Int64?
    public var detail: String

    public init(_ kind: Kind, sequence: Int64?, _ detail: String) {
        self.kind = kind
        self.sequence = sequence
        self.detail = detail
    }

    public var description: String { "\(kind.rawValue)\(sequence.map { " at sequence \($0)" } ?? ""): \(detail)" }
}

/// The verdict of ``LedgerAudit``.
public struct LedgerAuditReport: Sendable, Hashable {
    public var entries: Int64
    public var lastSequence: Int64
    /// Lower-case hex hash of the last entry (the genesis hash when empty).
    public var headHash: String
    public var checkpointsVerified: Int
    /// The highest checkpoint that verified, if any.
    public var lastCheckpoint: Int64?
    /// How many of the auditor's pinned checkpoints (saved earlier) the ledger still extends.
    public var pinnedVerified = 0
    /// Every `ledger.adopt` admin action in the chain ("entry N: what it chained or re-sealed"):
    /// where an operator vouched for rows or entries the server had not written or sealed.
    public var adoptions: [String] = []
    /// The first problem found, nil when the ledger is intact.
    public var problem: LedgerProblem?
    /// Every product and asset version the chained admin log does not back (a database audit
    /// only: an export holds no catalogue). After a problem in the chain, judged by the entries
    /// before it.
    public var catalogue: [CatalogueFinding] = []

    public var intact: Bool { problem == nil }

    /// Records the catalogue's findings; the first is the problem when the ledger has no other.
    public mutating func include(catalogue findings: [CatalogueFinding]) {
        catalogue = findings
        guard problem == nil, let first = findings.first else { return }
        problem = LedgerProblem(
            .catalogueUnbacked, sequence: nil,
            "\(first)\(findings.count > 1 ? " (and \(findings.count - 1) more)" : ""): changed behind the server's back, or from before Coffer logged every catalogue change (`coffer ledger adopt` vouches for it)"
        )
    }
}

/// Verifies a ledger streamed entry by entry, in memory proportional to the checkpoints only.
///
/// Give it the checkpoints and the expected public key first, then every entry in the order
/// read (``add(_:)``), then ``finish()``. It recomputes each hash from the entry's fields,
/// checks that sequence numbers run 1, 2, 3… without gaps, that each stored hash matches, and
/// that the chain reaches every signed checkpoint; entries after the last checkpoint are only
/// as trustworthy as the chain itself (a deleted tail after it cannot be told from a shorter
/// ledger — that is what checkpoints are for).
public struct LedgerAudit: Sendable {
    private var checkpoints: [Int64: LedgerCheckpoint] = [:]
    private var maxCheckpoint: Int64 = 0
    private var previous = LedgerChain.genesis
    private var expected: Int64 = 1
    private var lastVerifiedCheckpoint: Int64 = 0
    /// The last pinned checkpoint the chain reached (with a key, each pin is signed by it).
    private var lastPinned: Int64 = 0
    private var pinned: [Int64: LedgerCheckpoint] = [:]
    private var maxPinned: Int64 = 0
    /// A public key was given: the checkpoints are read.
    private var hasKey = false
    /// The admin log's catalogue entries, replayed for a database audit's catalogue check.
    public var catalogue = CatalogueAudit()
    private var report = LedgerAuditReport(
        entries: 0, lastSequence: 0, headHash: LedgerChain.genesis.hexString, checkpointsVerified: 0, lastCheckpoint: nil, problem: nil)

    /// `publicKey` nil checks the chain only (the ledger's own checkpoints are then ignored).
    ///
    /// `pinned` are checkpoints the auditor saved earlier (from `/v1/audit/checkpoints`): the
    /// ledger must still extend each one — the same hash at the same sequence — or it was
    /// rewritten, truncated or re-signed since. They are checked with or without `publicKey`
    /// (with it, each must also carry its signature).
    public init(checkpoints: [LedgerCheckpoint], publicKey: Curve25519.Signing.PublicKey?, pinned: [LedgerCheckpoint] = []) {
        for checkpoint in pinned {
            if let publicKey, !checkpoint.isSigned(by: publicKey) {
                fail(
                    .checkpointSignatureInvalid, checkpoint.sequence,
                    "the pinned checkpoint at \(checkpoint.sequence) is not signed by key \(LedgerSigner.keyId(publicKey))")
                continue
            }
            if let other = self.pinned[checkpoint.sequence], other.entryHash != checkpoint.entryHash {
                fail(.checkpointMismatch, checkpoint.sequence, "two pinned checkpoints at \(checkpoint.sequence) disagree: history was rewritten")
            }
            self.pinned[checkpoint.sequence] = checkpoint
            maxPinned = max(maxPinned, checkpoint.sequence)
        }
        guard let publicKey else { return }
        hasKey = true
        for checkpoint in checkpoints.sorted(by: { $0.sequence < $1.sequence }) {
            guard checkpoint.isSigned(by: publicKey) else {
                fail(
                    .checkpointSignatureInvalid, checkpoint.sequence,
                    "the checkpoint at \(checkpoint.sequence) is not signed by key \(LedgerSigner.keyId(publicKey))")
                continue
            }
            self.checkpoints[checkpoint.sequence] = checkpoint
            maxCheckpoint = max(maxCheckpoint, checkpoint.sequence)
        }
    }

    /// Records a problem that a reader of the storage found (a missing row, an unreadable line).
    public mutating func fail(_ kind: LedgerProblem.Kind, _ sequence: Int64?, _ detail: String) {
        if report.problem == nil { report.problem = LedgerProblem(kind, sequence: sequence, detail) }
    }

    /// The sequence after `sequence`, never past `Int64.max`: every sequence here comes from
    /// storage, and a row forged at `Int64.max` is a finding to report, not a trap.
    static func after(_ sequence: Int64) -> Int64 { sequence == .max ? .max : sequence + 1 }

    public mutating func add(_ chained: ChainedEntry) {
        let entry = chained.entry
        report.entries += 1
        if entry.kind == .adminAction, entry.values.count > 5, entry.values[3] == AdminActionName.ledgerAdopt.rawValue {
            report.adoptions.append("entry \(entry.sequence): \(entry.values[5] ?? "")")
        }
        if entry.sequence != expected {
            fail(
                .sequenceBroken, expected,
                entry.sequence > expected
                    ? "entries \(expected)–\(entry.sequence - 1) are missing" : "entry \(entry.sequence) appears where \(expected) belongs")
        }
        expected = Self.after(max(expected, entry.sequence))
        let hash = LedgerChain.hash(previous: previous, entry: entry)
        let hex = hash.hexString
        if hex != chained.entryHash {
            fail(.hashMismatch, entry.sequence, "entry \(entry.sequence) (\(entry.kind.rawValue) row \(entry.row)) does not match its recorded hash")
        }
        if let checkpoint = checkpoints[entry.sequence] {
            if checkpoint.entryHash == hex {
                report.checkpointsVerified += 1
                report.lastCheckpoint = entry.sequence
            } else {
                fail(
                    .checkpointMismatch, Self.after(lastVerifiedCheckpoint),
                    "the chain does not reach the hash signed at \(entry.sequence): an entry in \(Self.after(lastVerifiedCheckpoint))–\(entry.sequence) was changed"
                )
            }
            lastVerifiedCheckpoint = entry.sequence
        }
        if let pin = pinned[entry.sequence] {
            if pin.entryHash == hex {
                report.pinnedVerified += 1
                lastPinned = entry.sequence
            } else {
                fail(
                    .checkpointMismatch, entry.sequence,
                    "the ledger no longer extends the pinned checkpoint at \(entry.sequence) (signed \(pin.time)): history was rewritten or re-signed"
                )
            }
        }
        // Only entries the chain vouches for back the catalogue: after the first problem, an
        // edited entry could back the row it was edited to match.
        if report.problem == nil { catalogue.add(entry) }
        // Continue from the recomputed hash: every later entry is judged by the chain, not
        // by what was stored beside it.
        previous = hash
        report.lastSequence = entry.sequence
        report.headHash = hex
    }

    /// The database audits' rule for the head, the servers' own (``CheckpointPolicy/verifySeal(_:headSequence:headHash:covering:)``):
    /// every entry lies under a signature. Entries after the seal (`seal`, the chain's last
    /// entry `last`) were appended behind the servers' backs; without a seal, entries after the
    /// last checkpoint the chain reached mean the seal was removed — or the ledger predates
    /// seals and was never sealed since (a server refuses it too, until `coffer ledger adopt`).
    /// The second rule needs the key: without it the checkpoints are not read. Not for exports:
    /// they read their seal after their entries.
    public mutating func checkSeal(_ seal: LedgerCheckpoint?, last: Int64) {
        if let seal {
            if last > seal.sequence {
                fail(
                    .unsealed, Self.after(seal.sequence),
                    "entries \(Self.after(seal.sequence))–\(last) come after the head the servers last sealed (\(seal.sequence)): appended behind their back"
                )
            }
        } else if hasKey, last > report.lastCheckpoint ?? 0, maxCheckpoint <= last, maxPinned <= last {
            // (A signed or pinned checkpoint beyond the end: entries were removed, which
            // ``finish()`` reports as `truncated` — the diagnosis, not a missing seal.)
            let from = Self.after(report.lastCheckpoint ?? 0)
            fail(
                .unsealed, from,
                "entries \(from)–\(last) come after the last checkpoint and no seal covers them: the seal was removed, or the ledger was never sealed (a server refuses it until `coffer ledger adopt`)"
            )
        }
    }

    /// An export's rule for its end, with a key: the export ends at a signature (the seal it
    /// read before its entries, or a checkpoint), so entries after the last signed checkpoint
    /// (in the file, or pinned by the auditor) are vouched for by nothing — rows appended behind the servers' backs, exported by an
    /// honest server whose seal still covers only the head before them. (A signed checkpoint or
    /// a pin beyond the end is ``finish()``'s `truncated`.)
    public mutating func checkExportEnd() {
        let last = report.lastSequence
        let vouched = max(report.lastCheckpoint ?? 0, lastPinned)
        guard hasKey, last > vouched, maxCheckpoint <= last, maxPinned <= last else { return }
        let from = Self.after(vouched)
        fail(
            .unsealed, from,
            "entries \(from)–\(last) come after the export's last signature: nothing vouches for them (appended behind the servers' backs; an export written before 2026-11-29 could also end so while the ledger grew: export it again)"
        )
    }

    public mutating func finish() -> LedgerAuditReport {
        if maxPinned > report.lastSequence {
            fail(
                .truncated, Self.after(report.lastSequence),
                "the ledger ends at \(report.lastSequence) but a pinned checkpoint covers \(maxPinned): entries were removed")
        }
        if maxCheckpoint > report.lastSequence {
            fail(
                .truncated, Self.after(report.lastSequence),
                "the ledger ends at \(report.lastSequence) but a checkpoint was signed at \(maxCheckpoint): entries were removed")
        }
        return report
    }
}
