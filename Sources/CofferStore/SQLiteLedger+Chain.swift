import CofferCore
import Crypto
import Foundation
import GRDB

// MARK: - Checkpoints, the seal and reads of the chain

extension SQLiteLedger {
    /// Signs the chain's head now unless a checkpoint already covers it; returns the new
    /// checkpoint, if one was made. The server calls this every few seconds and at shutdown.
    @discardableResult
    public func checkpointHead(now: Date) async throws -> LedgerCheckpoint? {
        guard let policy = checkpoints else { return nil }
        return try await db.pool.write { db -> LedgerCheckpoint? in
            // Never sign over entries this server did not seal.
            try ChainStore.checkSeal(db, policy: policy)
            let head = try ChainStore.head(db)
            guard head.sequence > 0, head.sequence > (try ChainStore.latestCheckpoint(db)?.sequence ?? 0) else { return nil }
            let checkpoint = try policy.signer.checkpoint(
                sequence: head.sequence, entryHash: head.hash.hexString, time: Int64(now.timeIntervalSince1970))
            try ChainStore.insert(db, checkpoint)
            return checkpoint
        }
    }

    /// Rows of the chained tables that no ledger event chains (at most `limit`), oldest first:
    /// rows written before the chain existed, or inserted behind the server's back. The server
    /// refuses to start while there are any; ``adopt(by:now:reseal:)`` chains them on purpose.
    public func unchainedRows(limit: Int = 10) async throws -> [(kind: LedgerEventKind, row: Int64)] {
        try await db.pool.read { db in try ChainStore.unchainedRows(db, limit: limit).map { (kind: $0.kind, row: $0.row) } }
    }

    /// Ledger events after `after`, in order, joined with their rows.
    public func events(after: Int64, limit: Int) async throws -> [StoredEvent] {
        try await db.pool.read { db in try ChainStore.events(db, after: after, limit: limit) }
    }

    /// Signed checkpoints after `after`, in order.
    public func checkpoints(after: Int64, limit: Int) async throws -> [LedgerCheckpoint] {
        try await db.pool.read { db in try ChainStore.checkpoints(db, after: after, limit: limit) }
    }

    public func latestCheckpoint() async throws -> LedgerCheckpoint? {
        try await db.pool.read { db in try ChainStore.latestCheckpoint(db) }
    }

    /// Append-only triggers or replay-rule unique indexes that are missing or altered.
    public func schemaProblems() async throws -> [String] {
        try await db.pool.read { db in try ChainStore.schemaProblems(db) }
    }

    /// Throws ``LedgerIntegrityError`` when the chain does not end where this server's key
    /// sealed it (read-only; readiness probes call it).
    public func sealIntact() async throws {
        guard let policy = checkpoints else { return }
        try await db.pool.read { db in try ChainStore.checkSeal(db, policy: policy) }
    }

    /// Checks the seal before the server starts appending: the chain must end where this
    /// server's key sealed it (see ``LedgerIntegrityError``). A chain from before the seal that
    /// was shut down cleanly (its head under a checkpoint of this key) is sealed now.
    public func checkSeal(now: Date) async throws {
        guard let policy = checkpoints else { return }
        try await db.pool.write { db in
            try ChainStore.checkSeal(db, policy: policy)
            try ChainStore.seal(db, policy: policy, now: now)
        }
    }
}

// MARK: - Adoption

extension SQLiteLedger {
    /// Chains every unchained row, oldest first, then appends an admin action `ledger.adopt`
    /// saying how many of each kind were chained and by whom — in one transaction, so the
    /// adoption is itself a chained event that an auditor sees. Only for a database whose rows
    /// the operator vouches for (one from before the chain, or the admin log from before
    /// migration 0003): rows an attacker inserted would be chained too.
    ///
    /// A chain that does not end where this key sealed it (entries appended or removed behind
    /// the server's back, or a seal by another key) is refused with its ``LedgerIntegrityError``
    /// unless `reseal`: then the old seal and the re-sealed range are written into the adoption's
    /// detail, so auditors see exactly what the operator vouched for.
    public func adopt(by actor: AdminAction, now: Date, reseal: Bool = false) async throws -> Adoption {
        try await db.pool.write { [checkpoints] db in
            let resealed = try Self.brokenSeal(db, policy: checkpoints, reseal: reseal)
            let (chained, adoptedAdminRows) = try Self.chainUnchainedRows(db, policy: checkpoints, now: now)
            let findings = try Self.vouchForCatalogue(db, by: actor, policy: checkpoints, skipping: adoptedAdminRows)
            let stored = try ChainStore.insert(
                db, Self.adoption(by: actor, chained: chained, resealed: resealed, catalogue: findings), policy: checkpoints)
            // The operator vouches for the chain as it now stands: seal it.
            if let checkpoints { try ChainStore.seal(db, policy: checkpoints, now: now) }
            return Adoption(chained: chained, action: stored, catalogue: findings)
        }
    }

    /// Logs what the admin log lacks to back the catalogue as it stands
    /// (``CatalogueLog/adoption(of:by:)``); returns what it found. Every admin row is chained by
    /// now, and is replayed in chain order, as `verify` replays it. First without `skipping`, the
    /// rows this adoption chained: a catalogue entry inserted behind the server's back (under an
    /// honest admin's name) must not back a row unseen — the rows it would back are vouched for,
    /// and printed, like any other. Then with them: what they still expect that the database
    /// does not hold (a version, a product) is forgotten or deleted too, so `verify` passes.
    private static func vouchForCatalogue(
        _ db: Database, by actor: AdminAction, policy: CheckpointPolicy?, skipping: Set<Int64>
    ) throws -> [CatalogueFinding] {
        var found: [CatalogueFinding] = []
        for skipped in [skipping, []] {
            var catalogue = CatalogueAudit()
            let rows = try AdminActionRecord.fetchCursor(
                db,
                sql: """
                    SELECT a.* FROM ledger_events e JOIN admin_actions a ON a.sequence = e.row_sequence
                    WHERE e.sequence > 0 AND e.kind = 'adminAction' ORDER BY e.sequence
                    """)
            while let row = try rows.next() {
                guard let sequence = row.sequence, !skipped.contains(sequence) else { continue }
                catalogue.add(.adminAction(row.adminAction, sequence: sequence))
            }
            let findings = try catalogueFindings(db, &catalogue)
            // An unreadable row is found again on the second pass: named once.
            found += findings.filter { finding in
                finding.kind != .productUnreadable || !found.contains { $0.kind == .productUnreadable && $0.id == finding.id }
            }
            for action in CatalogueLog.adoption(of: findings, by: actor) {
                _ = try ChainStore.insert(db, AdminAction.escapedForLedger(action), policy: policy)
            }
        }
        return found
    }

    /// Nil when there is no key or the chain ends where it sealed it. Otherwise, with `reseal`,
    /// what the broken seal said (for the adoption's detail); without, its ``LedgerIntegrityError``.
    private static func brokenSeal(_ db: Database, policy: CheckpointPolicy?, reseal: Bool) throws -> String? {
        guard let policy else { return nil }
        do {
            try ChainStore.checkSeal(db, policy: policy)
            return nil
        } catch let error as LedgerIntegrityError {
            guard reseal else { throw error }
            let old = try ChainStore.sealedHead(db)
            return "re-sealed over a broken seal (\(error)); the seal said "
                + (old.map { "entry \($0.sequence), hash \($0.entryHash), key \($0.keyId)" } ?? "nothing")
                + ", the chain ended at \(try ChainStore.head(db).sequence)"
        }
    }

    /// Chains every unchained row, oldest first, 500 at a time; returns how many of each kind,
    /// and the admin rows among them.
    private static func chainUnchainedRows(
        _ db: Database, policy: CheckpointPolicy?, now: Date
    ) throws -> (counts: [LedgerEventKind: Int], adminRows: Set<Int64>) {
        var chained: [LedgerEventKind: Int] = [:]
        var adminRows: Set<Int64> = []
        while true {
            let pending = try ChainStore.unchainedRows(db, limit: 500)
            if pending.isEmpty { return (chained, adminRows) }
            let rows = try ChainedRows(db, pending.map { (kind: $0.kind, row: $0.row) })
            for item in pending {
                guard let entry = rows.entry(item.kind, row: item.row) else { continue }
                try ChainStore.append(db, policy: policy, now: now, entry: entry)
                chained[item.kind, default: 0] += 1
                if item.kind == .adminAction { adminRows.insert(item.row) }
            }
        }
    }

    /// The admin action `ledger.adopt` recording what was chained, done by `actor`.
    private static func adoption(
        by actor: AdminAction, chained: [LedgerEventKind: Int], resealed: String?, catalogue: [CatalogueFinding]
    ) -> AdminAction {
        var action = actor
        action.action = AdminActionName.ledgerAdopt.rawValue
        action.target = "ledger"
        let counts = chained.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.value) \($0.key.rawValue)" }
        let catalogued = CatalogueLog.adoptionSummary(catalogue)
        action.detail =
            (counts.isEmpty ? "nothing to chain" : "chained " + counts.joined(separator: ", ")) + (catalogued.isEmpty ? "" : "; " + catalogued)
            + (resealed.map { "; " + $0 } ?? "")
        return action
    }
}

// MARK: - Audit

extension SQLiteLedger {
    /// Verifies the stored ledger against `publicKey` (nil: the chain only) and the auditor's
    /// `pinned` checkpoints, in one read transaction (a consistent snapshot while the server
    /// appends), streaming the events page by page. The seal counts as a checkpoint of the
    /// head, so a cut tail is `truncated` and entries beyond it are `unsealed` — as are, with a
    /// key, entries after the last checkpoint when there is no seal (``LedgerAudit/checkSeal(_:last:)``).
    public func audit(publicKey: Curve25519.Signing.PublicKey?, pinned: [LedgerCheckpoint] = []) async throws -> LedgerAuditReport {
        try await db.pool.read { db in
            let checkpoints = try Self.allCheckpoints(db)
            let seal = try ChainStore.sealedHead(db)
            var audit = LedgerAudit(checkpoints: checkpoints + (seal.map { [$0] } ?? []), publicKey: publicKey, pinned: pinned)
            let last = try Self.addEvents(db, to: &audit)
            audit.checkSeal(seal, last: last)
            // Problems the chain itself shows come first; then what only the tables show.
            var report = audit.finish()
            let tables = try Self.tableProblems(db)
            if report.problem == nil { report.problem = tables.first }
            report.include(catalogue: try Self.catalogueFindings(db, &audit.catalogue))
            return report
        }
    }

    /// Checks every product and asset version against the admin log's catalogue entries.
    static func catalogueFindings(_ db: Database, _ catalogue: inout CatalogueAudit) throws -> [CatalogueFinding] {
        for record in try ProductRecord.order(ProductRecord.Columns.productId).fetchAll(db) {
            catalogue.product(id: record.productId, try? record.product())
        }
        let versions = try AssetRecord.order(AssetRecord.Columns.assetId, AssetRecord.Columns.version).fetchCursor(db)
        while let record = try versions.next() { catalogue.version(record.asset) }
        return catalogue.finish()
    }

    /// Every signed checkpoint, in order.
    private static func allCheckpoints(_ db: Database) throws -> [LedgerCheckpoint] {
        var all: [LedgerCheckpoint] = []
        while true {
            let page = try ChainStore.checkpoints(db, after: all.last?.sequence ?? 0, limit: 1000)
            all += page
            if page.count < 1000 { return all }
        }
    }

    /// Feeds every event to `audit`, 1000 at a time (an event whose row is gone is a
    /// `rowMismatch`); returns the last sequence, 0 for an empty chain.
    private static func addEvents(_ db: Database, to audit: inout LedgerAudit) throws -> Int64 {
        var after: Int64 = 0
        while true {
            let page = try ChainStore.events(db, after: after, limit: 1000)
            for event in page {
                if event.entry == nil {
                    audit.fail(.rowMismatch, event.sequence, "entry \(event.sequence) chains \(event.kind.rawValue) row \(event.row), which is gone")
                }
                audit.add(event.chainedEntry)
            }
            guard let last = page.last else { return after }
            after = last.sequence
        }
    }

    /// What only the tables show, in order of precedence: an event numbered below the chain's
    /// first (the walk from 1 never reads it, but the rules' "is it chained?" would find it), a
    /// row the chain does not hold, a value stored in a form the server never writes
    /// (``ChainStore/storageProblems(_:)``), two redemptions of one purchase, the schema's
    /// guarantees altered.
    private static func tableProblems(_ db: Database) throws -> [LedgerProblem] {
        var problems: [LedgerProblem] = []
        if let below = try Row.fetchOne(db, sql: "SELECT sequence, kind, row_sequence FROM ledger_events WHERE sequence < 1 LIMIT 1") {
            let sequence: Int64 = below["sequence"] ?? 0
            let kind: String = below["kind"] ?? "?"
            let row: Int64 = below["row_sequence"] ?? 0
            problems.append(
                LedgerProblem(
                    .sequenceBroken, sequence: nil,
                    "an event numbered \(sequence) (below the chain's first) chains \(LedgerText.escaped(kind, maxBytes: 64)) row \(row): inserted behind the server's back"
                ))
        }
        if let stray = try ChainStore.unchainedRows(db, limit: 1).first {
            problems.append(
                LedgerProblem(
                    .rowMismatch, sequence: nil,
                    "\(stray.kind.rawValue) row \(stray.row) is in the database but not in the chain (inserted behind the server's back)"))
        }
        for problem in try ChainStore.storageProblems(db) {
            problems.append(LedgerProblem(.rowMismatch, sequence: nil, problem))
        }
        if let twice = try Row.fetchOne(
            db,
            sql: """
                SELECT environment, coalesce(replay_key, transaction_id) AS k, COUNT(*) AS n FROM redemptions
                GROUP BY environment, k HAVING n > 1 LIMIT 1
                """)
        {
            let purchase = "\(twice["environment"] as String? ?? "?"), \(twice["k"] as String? ?? "?")"
            problems.append(LedgerProblem(.replayBroken, sequence: nil, "\(twice["n"] as Int? ?? 2) redemptions of one purchase (\(purchase))"))
        }
        if let problem = try ChainStore.schemaProblems(db).first {
            problems.append(LedgerProblem(.schemaAltered, sequence: nil, "\(problem): the ledger's guarantees no longer hold in this database"))
        }
        return problems
    }
}
