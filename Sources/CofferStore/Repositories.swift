import CofferCore
import Crypto
import Foundation
import GRDB

// MARK: - Catalogue

/// The catalogue (products and versioned assets) in SQLite.
public struct SQLiteCatalogue: CatalogueRepository {
    private let db: CofferDatabase

    /// A catalogue stored in `db`.
    public init(_ db: CofferDatabase) { self.db = db }

    /// Inserts or replaces the product with the same product id.
    public func putProduct(_ product: Product) async throws {
        try await db.pool.write { db in try ProductRecord(product).upsert(db) }
    }

    /// The product with this id, if any.
    public func product(_ productId: String) async throws -> Product? {
        try await db.pool.read { db in try ProductRecord.fetchOne(db, key: productId)?.product }
    }

    /// All products, sorted by product id.
    public func products() async throws -> [Product] {
        try await db.pool.read { db in try ProductRecord.order(ProductRecord.Columns.productId).fetchAll(db).map(\.product) }
    }

    /// Deletes a product; returns whether one was deleted.
    public func deleteProduct(_ productId: String) async throws -> Bool {
        try await db.pool.write { db in try ProductRecord.deleteOne(db, key: productId) }
    }

    /// Stores version `max(version) + 1` of an asset (1 for a new asset) in one write transaction.
    public func addAssetVersion(assetId: String, name: String, contentType: String, size: Int64, sha256: String, at: Date) async throws
        -> Asset
    {
        try await db.pool.write { db in
            let latest = try AssetRecord.latestVersion(of: assetId, in: db) ?? 0
            let asset = Asset(
                assetId: assetId, version: latest + 1, name: name, contentType: contentType, size: size, sha256: sha256, createdAt: at)
            try AssetRecord(asset).insert(db)
            return asset
        }
    }

    /// The latest version of an asset.
    public func asset(_ assetId: String) async throws -> Asset? {
        try await db.pool.read { db in
            try AssetRecord.filter(AssetRecord.Columns.assetId == assetId).order(AssetRecord.Columns.version.desc).fetchOne(db)?.asset
        }
    }

    /// The latest version of every asset, sorted by asset id.
    public func assets() async throws -> [Asset] {
        try await db.pool.read { db in try AssetRecord.fetchLatestVersions(db).map(\.asset) }
    }
}

extension AssetRecord {
    /// The highest stored version of `assetId`, or nil when the asset has none.
    static func latestVersion(of assetId: String, in db: Database) throws -> Int? {
        try Int.fetchOne(db, AssetRecord.filter(Columns.assetId == assetId).select(max(Columns.version)))
    }

    /// One row per asset id (its highest version), sorted by asset id.
    static func fetchLatestVersions(_ db: Database) throws -> [AssetRecord] {
        try AssetRecord.fetchAll(
            db,
            sql: """
                SELECT a.* FROM assets a
                JOIN (SELECT asset_id, MAX(version) AS version FROM assets GROUP BY asset_id) latest
                  ON a.asset_id = latest.asset_id AND a.version = latest.version
                ORDER BY a.asset_id
                """)
    }
}

// MARK: - Ledger

/// The replay ledger and rejected attempts in SQLite.
///
/// The replay guarantee: writes are serialised, and inside the write transaction (see
/// ``GroupCommitter``) a transaction id already present is a replay; the `UNIQUE` constraint on
/// `redemptions.transaction_id` backs that up, so two concurrent redemptions of one
/// transaction can never both succeed.
public struct SQLiteLedger: LedgerRepository {
    let db: CofferDatabase
    /// Signs checkpoints; nil keeps the hash chain without signing (tools that only read).
    public let checkpoints: CheckpointPolicy?

    /// A ledger stored in `db`. Every row it writes is appended to the hash chain in the same
    /// transaction; `checkpoints` signs one every `every` entries.
    private let committer: GroupCommitter

    public init(_ db: CofferDatabase, checkpoints: CheckpointPolicy? = nil) {
        self.db = db
        self.checkpoints = checkpoints
        self.committer = GroupCommitter(db: db, checkpoints: checkpoints)
    }

    /// Inserts a redemption (a plain INSERT, group-committed with concurrent writes: see
    /// ``GroupCommitter``). Returns `.alreadyRedeemed` when the UNIQUE constraint on
    /// `transaction_id` rejects it, otherwise the stored row with its assigned `sequence`. Returns once
    /// the transaction is committed (`synchronous = FULL`). Other errors, including a unique violation
    /// on `redemption_id` or `grant_hash` for a new transaction id, propagate.
    public func insert(_ redemption: Redemption, refusals: InsertRefusals?) async throws -> LedgerInsertOutcome {
        try await committer.insert(redemption, refusals: refusals)
    }

    /// Appends a rejected attempt (its `sequence` is assigned by SQLite), group-committed
    /// like redemptions.
    public func record(_ attempt: RejectedAttempt) async throws {
        try await committer.record(attempt)
    }

    /// Appends a revocation and its chain event in one transaction (see
    /// ``LedgerRepository/revoke(_:keepUnredeemed:)``).
    public func revoke(_ revocation: Revocation, keepUnredeemed: Bool) async throws -> RevocationOutcome {
        let key = revocation.replayKey ?? revocation.transactionId
        return try await db.pool.write { [checkpoints] db in
            try ChainStore.sealed(db, policy: checkpoints, now: revocation.recordedAt) { () throws -> RevocationOutcome in
                try Self.revoke(db, revocation, key: key, keepUnredeemed: keepUnredeemed, checkpoints: checkpoints)
            }
        }
    }

    private static func revoke(_ db: Database, _ revocation: Revocation, key: String, keepUnredeemed: Bool, checkpoints: CheckpointPolicy?) throws
        -> RevocationOutcome
    {
        if try ChainStore.revocation(db, environment: revocation.environment, replayKey: key) != nil { return .alreadyRevoked }
        // Rows from before migration 0003 are keyed by transaction id: their original id matches too.
        let redemptionId = try ChainStore.redemptionIds(db, environment: revocation.environment ?? "", replayKey: key).first
        if redemptionId == nil && !keepUnredeemed { return .notRedeemed }
        var row = revocation
        row.redemptionId = redemptionId ?? ""
        row = try ChainStore.insert(db, row)
        let stored = row
        try ChainStore.append(db, policy: checkpoints, now: revocation.recordedAt) { .revocation(stored, sequence: $0) }
        return redemptionId == nil ? .recordedUnredeemed(stored) : .revoked(stored)
    }

    public func revocation(of redemption: Redemption) async throws -> Revocation? {
        try await db.pool.read { db in
            if let byId = try Row.fetchOne(db, sql: "SELECT * FROM revocations WHERE redemption_id = ? LIMIT 1", arguments: [redemption.redemptionId])
            {
                return try ChainStore.revocation(byId)
            }
            return try ChainStore.revocation(db, environment: redemption.environment, replayKey: redemption.effectiveReplayKey)
        }
    }

    public func revocations(after: Int64, limit: Int) async throws -> [Revocation] {
        try await db.pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM revocations WHERE sequence > ? ORDER BY sequence LIMIT ?", arguments: [after, max(0, limit)])
                .map(ChainStore.revocation)
        }
    }

    /// The redemption whose grant hash is `grantHash`, if any.
    /// The chained redemption whose grant hash is `grantHash`, if any: a row no ledger event
    /// chains (inserted behind the server's back) grants nothing.
    public func redemption(grantHash: String) async throws -> Redemption? {
        try await db.pool.read { db in
            try RedemptionRecord.fetchOne(
                db,
                sql: """
                    SELECT r.* FROM redemptions r WHERE r.grant_hash = ?
                      AND EXISTS (SELECT 1 FROM ledger_events e WHERE e.kind = 'redemption' AND e.row_sequence = r.sequence)
                    """, arguments: [grantHash]
            )?.redemption
        }
    }

    /// Redemptions matching every set field of `filter` (`from` inclusive, `to` exclusive on
    /// `redeemedAt`; `code` is ignored), with `sequence > after`, in ledger order, at most `limit`.
    public func redemptions(_ filter: AuditFilter) async throws -> [Redemption] {
        try await db.pool.read { db in try RedemptionRecord.audit(filter).fetchAll(db).map(\.redemption) }
    }

    /// Rejected attempts matching every set field of `filter` that applies to attempts
    /// (`transactionId`, `productId`, `code`, `from` inclusive and `to` exclusive on `at`),
    /// with `sequence > after`, in order, at most `limit`.
    public func attempts(_ filter: AuditFilter) async throws -> [RejectedAttempt] {
        try await db.pool.read { db in try AttemptRecord.audit(filter).fetchAll(db).map(\.attempt) }
    }
}

// MARK: - Hash chain

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
    /// refuses to start while there are any; ``adopt(by:now:)`` chains them on purpose.
    public func unchainedRows(limit: Int = 10) async throws -> [(kind: LedgerEventKind, row: Int64)] {
        try await db.pool.read { db in try ChainStore.unchainedRows(db, limit: limit).map { (kind: $0.kind, row: $0.row) } }
    }

    /// What ``adopt(by:now:)`` did.
    public struct Adoption: Sendable, Hashable {
        /// Rows chained, by kind.
        public var chained: [LedgerEventKind: Int]
        /// The admin action that records the adoption (itself chained, last).
        public var action: AdminAction
    }

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
            var resealed: String?
            if let checkpoints {
                do {
                    try ChainStore.checkSeal(db, policy: checkpoints)
                } catch let error as LedgerIntegrityError {
                    guard reseal else { throw error }
                    let old = try ChainStore.sealedHead(db)
                    resealed =
                        "re-sealed over a broken seal (\(error)); the seal said "
                        + (old.map { "entry \($0.sequence), hash \($0.entryHash), key \($0.keyId)" } ?? "nothing")
                        + ", the chain ended at \(try ChainStore.head(db).sequence)"
                }
            }
            var chained: [LedgerEventKind: Int] = [:]
            while true {
                let pending = try ChainStore.unchainedRows(db, limit: 500)
                if pending.isEmpty { break }
                for item in pending {
                    switch item.kind {
                    case .redemption:
                        guard let r = try RedemptionRecord.filter(RedemptionRecord.Columns.sequence == item.row).fetchOne(db)?.redemption else {
                            continue
                        }
                        try ChainStore.append(db, policy: checkpoints, now: now) { .redemption(r, sequence: $0) }
                    case .attempt:
                        guard let a = try AttemptRecord.filter(AttemptRecord.Columns.sequence == item.row).fetchOne(db)?.attempt else { continue }
                        try ChainStore.append(db, policy: checkpoints, now: now) { .attempt(a, sequence: $0) }
                    case .revocation:
                        guard let row = try Row.fetchOne(db, sql: "SELECT * FROM revocations WHERE sequence = ?", arguments: [item.row]) else {
                            continue
                        }
                        let r = try ChainStore.revocation(row)
                        try ChainStore.append(db, policy: checkpoints, now: now) { .revocation(r, sequence: $0) }
                    case .adminAction:
                        guard let row = try Row.fetchOne(db, sql: "SELECT * FROM admin_actions WHERE sequence = ?", arguments: [item.row]) else {
                            continue
                        }
                        let a = try ChainStore.adminAction(row)
                        try ChainStore.append(db, policy: checkpoints, now: now) { .adminAction(a, sequence: $0) }
                    }
                    chained[item.kind, default: 0] += 1
                }
            }
            var action = actor
            action.action = "ledger.adopt"
            action.target = "ledger"
            action.detail =
                (chained.isEmpty
                    ? "nothing to chain"
                    : "chained "
                        + chained.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.value) \($0.key.rawValue)" }.joined(separator: ", "))
                + (resealed.map { "; " + $0 } ?? "")
            let stored = try ChainStore.insert(db, action, policy: checkpoints)
            // The operator vouches for the chain as it now stands: seal it.
            if let checkpoints { try ChainStore.seal(db, policy: checkpoints, now: now) }
            return Adoption(chained: chained, action: stored)
        }
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

    /// Writes the chained export (``LedgerExport``) in chunks: header, every entry, then the
    /// checkpoints up to the last entry written.
    public func export(publicKey: Curve25519.Signing.PublicKey?, now: Date, write: (String) async throws -> Void) async throws {
        try await write(try LedgerExport.headerLine(publicKey: publicKey, exportedAt: now))
        var after: Int64 = 0
        while true {
            let page = try await events(after: after, limit: 500)
            var out = ""
            for event in page {
                let entry = event.entry ?? LedgerEntry(sequence: event.sequence, kind: event.kind, row: event.row, values: [])
                out += try LedgerExport.entryLine(ChainedEntry(entry: entry, entryHash: event.entryHash))
            }
            if !out.isEmpty { try await write(out) }
            guard let last = page.last else { break }
            after = last.sequence
            if page.count < 500 { break }
        }
        var cursor: Int64 = 0
        var written: Set<Int64> = []
        while true {
            let page = try await checkpoints(after: cursor, limit: 500)
            let covered = page.filter { $0.sequence <= after }
            if !covered.isEmpty { try await write(try covered.map(LedgerExport.checkpointLine).joined()) }
            written.formUnion(covered.map(\.sequence))
            guard let last = page.last, page.count == 500, covered.count == page.count else { break }
            cursor = last.sequence
        }
        // The seal signs the head: when it covers the last entry written, it is one more checkpoint.
        if let seal = try await db.pool.read({ db in try ChainStore.sealedHead(db) }), seal.sequence <= after, !written.contains(seal.sequence) {
            try await write(try LedgerExport.checkpointLine(seal))
        }
    }

    /// Verifies the stored ledger against `publicKey` (nil: the chain only) and the auditor's
    /// `pinned` checkpoints, in one read transaction (a consistent snapshot while the server
    /// appends), streaming the events page by page. The seal counts as a checkpoint of the
    /// head, so a cut tail is `truncated` and entries beyond it are `unsealed`.
    public func audit(publicKey: Curve25519.Signing.PublicKey?, pinned: [LedgerCheckpoint] = []) async throws -> LedgerAuditReport {
        try await db.pool.read { db in
            var all: [LedgerCheckpoint] = []
            while true {
                let page = try ChainStore.checkpoints(db, after: all.last?.sequence ?? 0, limit: 1000)
                all += page
                if page.count < 1000 { break }
            }
            let seal = try ChainStore.sealedHead(db)
            var audit = LedgerAudit(checkpoints: all + (seal.map { [$0] } ?? []), publicKey: publicKey, pinned: pinned)
            var after: Int64 = 0
            while true {
                let page = try ChainStore.events(db, after: after, limit: 1000)
                for event in page {
                    if let entry = event.entry {
                        audit.add(ChainedEntry(entry: entry, entryHash: event.entryHash))
                    } else {
                        audit.fail(
                            .rowMismatch, event.sequence, "entry \(event.sequence) chains \(event.kind.rawValue) row \(event.row), which is gone")
                        audit.add(
                            ChainedEntry(
                                entry: LedgerEntry(sequence: event.sequence, kind: event.kind, row: event.row, values: []), entryHash: event.entryHash
                            ))
                    }
                }
                guard let last = page.last else { break }
                after = last.sequence
            }
            if let seal, after > seal.sequence {
                audit.fail(
                    .unsealed, seal.sequence + 1,
                    "entries \(seal.sequence + 1)–\(after) come after the head the server last sealed (\(seal.sequence)): appended behind its back")
            }
            // Problems the chain itself shows come first; then what only the tables show.
            var report = audit.finish()
            func otherwise(_ kind: LedgerProblem.Kind, _ detail: String) {
                if report.problem == nil { report.problem = LedgerProblem(kind, sequence: nil, detail) }
            }
            if let stray = try ChainStore.unchainedRows(db, limit: 1).first {
                otherwise(
                    .rowMismatch,
                    "\(stray.kind.rawValue) row \(stray.row) is in the database but not in the chain (inserted behind the server's back)")
            }
            if let twice = try Row.fetchOne(
                db,
                sql: """
                    SELECT environment, coalesce(replay_key, transaction_id) AS k, COUNT(*) AS n FROM redemptions
                    GROUP BY environment, k HAVING n > 1 LIMIT 1
                    """)
            {
                otherwise(
                    .replayBroken,
                    "\(twice["n"] as Int? ?? 2) redemptions of one purchase (\(twice["environment"] as String? ?? "?"), \(twice["k"] as String? ?? "?"))"
                )
            }
            if let problem = try ChainStore.schemaProblems(db).first {
                otherwise(.schemaAltered, "\(problem): the ledger's guarantees no longer hold in this database")
            }
            return report
        }
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

extension RedemptionRecord {
    /// The audit query for `filter`, mirroring `InMemoryLedger.redemptions(_:)`.
    static func audit(_ f: AuditFilter) -> QueryInterfaceRequest<RedemptionRecord> {
        var request = RedemptionRecord.filter(Columns.sequence > f.after)
        if let value = f.transactionId { request = request.filter(Columns.transactionId == value) }
        if let value = f.originalTransactionId { request = request.filter(Columns.originalTransactionId == value) }
        if let value = f.productId { request = request.filter(Columns.productId == value) }
        if let value = f.bundleId { request = request.filter(Columns.bundleId == value) }
        if let value = f.from { request = request.filter(Columns.redeemedAt >= value.timeIntervalSince1970) }
        if let value = f.to { request = request.filter(Columns.redeemedAt < value.timeIntervalSince1970) }
        return request.order(Columns.sequence).limit(Swift.max(0, f.limit))
    }
}

extension AttemptRecord {
    /// The audit query for `filter`, mirroring `InMemoryLedger.attempts(_:)`.
    static func audit(_ f: AuditFilter) -> QueryInterfaceRequest<AttemptRecord> {
        var request = AttemptRecord.filter(Columns.sequence > f.after)
        if let value = f.transactionId { request = request.filter(Columns.transactionId == value) }
        if let value = f.productId { request = request.filter(Columns.productId == value) }
        if let value = f.code { request = request.filter(Columns.code == value) }
        if let value = f.from { request = request.filter(Columns.at >= value.timeIntervalSince1970) }
        if let value = f.to { request = request.filter(Columns.at < value.timeIntervalSince1970) }
        return request.order(Columns.sequence).limit(Swift.max(0, f.limit))
    }
}

// MARK: - Keys

/// Admin and auditor keys in SQLite (only the secret's hash is stored).
public struct SQLiteKeys: KeyRepository {
    private let db: CofferDatabase

    /// A key store in `db`.
    public init(_ db: CofferDatabase) { self.db = db }

    /// Inserts a key. A duplicate key id or secret hash throws (SQLite UNIQUE / PRIMARY KEY):
    /// unlike the in-memory store, an existing key (possibly revoked) is never overwritten.
    public func create(_ key: APIKey) async throws {
        try await db.pool.write { db in try APIKeyRecord(key).insert(db) }
    }

    /// The key with this secret hash, revoked or not (the caller checks `revokedAt`).
    public func key(secretHash: String) async throws -> APIKey? {
        try await db.pool.read { db in try APIKeyRecord.filter(APIKeyRecord.Columns.secretHash == secretHash).fetchOne(db)?.key }
    }

    /// Sets `revokedAt` on a live key; returns whether a row changed.
    public func revoke(keyId: String, at: Date) async throws -> Bool {
        try await db.pool.write { db in
            try APIKeyRecord.filter(APIKeyRecord.Columns.keyId == keyId && APIKeyRecord.Columns.revokedAt == nil)
                .updateAll(db, APIKeyRecord.Columns.revokedAt.set(to: at.timeIntervalSince1970)) > 0
        }
    }
}

// MARK: - Admin log

/// The admin audit log in SQLite (`admin_actions`, append-only by trigger), chained in the
/// ledger's hash chain like redemptions and attempts.
public struct SQLiteAdminLog: AdminLogRepository {
    private let db: CofferDatabase
    private let checkpoints: CheckpointPolicy?

    /// `checkpoints` signs a checkpoint when an action lands on the policy's interval (the
    /// CLI, which may not hold the key, passes nil: the server's checkpoint service signs later).
    public init(_ db: CofferDatabase, checkpoints: CheckpointPolicy? = nil) {
        self.db = db
        self.checkpoints = checkpoints
    }

    public func record(_ a: AdminAction) async throws {
        var action = a
        action.keyName = LedgerText.escaped(a.keyName, maxBytes: 128)
        action.target = LedgerText.escaped(a.target, maxBytes: 512)
        action.detail = LedgerText.escaped(a.detail, maxBytes: 1024)
        action.action = LedgerText.escaped(a.action, maxBytes: 64)
        let stored = action
        try await db.pool.write { [checkpoints] db in
            try ChainStore.sealed(db, policy: checkpoints, now: stored.at) { try ChainStore.insert(db, stored, policy: checkpoints) }
        }
    }

    public func actions(after: Int64, limit: Int) async throws -> [AdminAction] {
        try await db.pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM admin_actions WHERE sequence > ? ORDER BY sequence LIMIT ?", arguments: [after, max(0, limit)])
                .map(ChainStore.adminAction)
        }
    }
}
