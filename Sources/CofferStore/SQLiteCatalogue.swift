import CofferCore
import Foundation
import GRDB

/// The catalogue (products and versioned assets) in SQLite. A change's admin-log entry is
/// written in its transaction, chained and sealed under `checkpoints`.
public struct SQLiteCatalogue: CatalogueRepository {
    private let db: CofferDatabase
    private let checkpoints: CheckpointPolicy?

    /// A catalogue stored in `db`; `checkpoints` seals the chain when a change is logged (the
    /// server's policy, as its admin log's).
    public init(_ db: CofferDatabase, checkpoints: CheckpointPolicy? = nil) {
        self.db = db
        self.checkpoints = checkpoints
    }

    /// Inserts or replaces the product with the same product id.
    public func putProduct(_ product: Product, logging: AdminAction?) async throws {
        try await db.pool.write { [checkpoints] db in
            try ProductRecord(product).upsert(db)
            try ChainStore.log(db, logging, policy: checkpoints)
        }
    }

    /// The product with this id, if any.
    public func product(_ productId: String) async throws -> Product? {
        try await db.pool.read { db in try ProductRecord.fetchOne(db, key: productId)?.product() }
    }

    /// All products, sorted by product id.
    public func products() async throws -> [Product] {
        try await db.pool.read { db in try ProductRecord.order(ProductRecord.Columns.productId).fetchAll(db).map { try $0.product() } }
    }

    /// Deletes a product; returns whether one was deleted.
    public func deleteProduct(_ productId: String, logging: AdminAction?) async throws -> Bool {
        try await db.pool.write { [checkpoints] db in
            guard try ProductRecord.deleteOne(db, key: productId) else { return false }
            try ChainStore.log(db, logging, policy: checkpoints)
            return true
        }
    }

    /// Stores version `max(version) + 1` of an asset (1 for a new asset) in one write transaction.
    public func addAssetVersion(
        assetId: String, name: String, contentType: String, size: Int64, sha256: String, at: Date, logging: AssetLogging?
    ) async throws -> Asset {
        try await db.pool.write { [checkpoints] db in
            let latest = try AssetRecord.latestVersion(of: assetId, in: db) ?? 0
            let asset = Asset(
                assetId: assetId, version: latest + 1, name: name, contentType: contentType, size: size, sha256: sha256, createdAt: at)
            try AssetRecord(asset).insert(db)
            try ChainStore.log(db, logging?(asset), policy: checkpoints)
            return asset
        }
    }

    /// The latest version of an asset.
    public func asset(_ assetId: String) async throws -> Asset? {
        try await db.pool.read { db in
            try AssetRecord.filter(AssetRecord.Columns.assetId == assetId).order(AssetRecord.Columns.version.desc).fetchOne(db)?.asset
        }
    }

    public func versions(of assetId: String) async throws -> [Asset] {
        try await db.pool.read { db in
            try AssetRecord.filter(AssetRecord.Columns.assetId == assetId).order(AssetRecord.Columns.version.desc).fetchAll(db).map(\.asset)
        }
    }

    /// The latest version of every asset, sorted by asset id.
    public func assets() async throws -> [Asset] {
        try await db.pool.read { db in try AssetRecord.fetchLatestVersions(db).map(\.asset) }
    }

    public func referencedDigests() async throws -> Set<String> {
        try await db.pool.read { db in Set(try String.fetchAll(db, sql: "SELECT DISTINCT sha256 FROM assets")) }
    }

    /// Every version of every asset, by asset id and version (for `coffer ledger copy`).
    public func allVersions() async throws -> [Asset] {
        try await db.pool.read { db in
            try AssetRecord.order(AssetRecord.Columns.assetId, AssetRecord.Columns.version).fetchAll(db).map(\.asset)
        }
    }
}

extension SQLiteCatalogue: ContentPinRepository {
    public func pinnedTag(location: String, sha256: String) async throws -> String? {
        try await db.pool.read { db in
            try String.fetchOne(
                db, sql: "SELECT tag FROM content_pins WHERE location = ? AND sha256 = ? ORDER BY pin_id DESC LIMIT 1", arguments: [location, sha256])
        }
    }

    /// Every pin, oldest first (`coffer ledger copy`).
    public func allPins() async throws -> [ContentPin] {
        try await db.pool.read { db in
            try Row.fetchAll(db, sql: "SELECT location, sha256, tag, pinned_at FROM content_pins ORDER BY pin_id").map {
                ContentPin(location: $0[0], sha256: $0[1], tag: $0[2], pinnedAt: Date(timeIntervalSince1970: $0[3]))
            }
        }
    }

    public func pin(location: String, sha256: String, tag: String, at: Date) async throws {
        try await db.pool.write { db in
            try db.execute(
                sql: "INSERT INTO content_pins (location, sha256, tag, pinned_at) VALUES (?, ?, ?, ?)",
                arguments: [location, sha256, tag, at.timeIntervalSince1970])
        }
    }
}
