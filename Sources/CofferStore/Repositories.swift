import CofferCore
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
/// The replay guarantee is the `UNIQUE` constraint on `redemptions.transaction_id`: an insert
/// never reads first, so two concurrent redemptions of one transaction cannot both succeed.
public struct SQLiteLedger: LedgerRepository {
    private let db: CofferDatabase

    /// A ledger stored in `db`.
    public init(_ db: CofferDatabase) { self.db = db }

    /// Inserts a redemption (a plain INSERT). Returns `.alreadyRedeemed` when the UNIQUE constraint on
    /// `transaction_id` rejects it, otherwise the stored row with its assigned `sequence`. Returns once
    /// the transaction is committed (`synchronous = FULL`). Other errors, including a unique violation
    /// on `redemption_id` or `grant_hash` for a new transaction id, propagate.
    public func insert(_ redemption: Redemption) async throws -> LedgerInsertOutcome {
        try await db.pool.write { db in
            do {
                try RedemptionRecord(redemption).insert(db)
            } catch let error as DatabaseError where error.extendedResultCode == .SQLITE_CONSTRAINT_UNIQUE {
                // The statement was rolled back by SQLite. Tell a replay apart from a collision
                // on another unique column; this read only classifies the error.
                if try RedemptionRecord.filter(RedemptionRecord.Columns.transactionId == redemption.transactionId).fetchCount(db) > 0 {
                    return .alreadyRedeemed
                }
                throw error
            }
            var row = redemption
            row.sequence = db.lastInsertedRowID
            return .inserted(row)
        }
    }

    /// Appends a rejected attempt (its `sequence` is assigned by SQLite).
    public func record(_ attempt: RejectedAttempt) async throws {
        try await db.pool.write { db in try AttemptRecord(attempt).insert(db) }
    }

    /// The redemption whose grant hash is `grantHash`, if any.
    public func redemption(grantHash: String) async throws -> Redemption? {
        try await db.pool.read { db in
            try RedemptionRecord.filter(RedemptionRecord.Columns.grantHash == grantHash).fetchOne(db)?.redemption
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
