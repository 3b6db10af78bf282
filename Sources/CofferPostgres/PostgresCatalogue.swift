import CofferCore
import Foundation
import PostgresNIO

/// The catalogue (products and versioned assets) in PostgreSQL. A change's admin-log entry is
/// written in its transaction, chained and sealed under `checkpoints`.
public struct PostgresCatalogue: CatalogueRepository {
    private let backend: PostgresBackend
    private let checkpoints: CheckpointPolicy?

    /// `checkpoints` seals the chain when a change is logged (the server's policy, as its admin log's).
    public init(_ backend: PostgresBackend, checkpoints: CheckpointPolicy? = nil) {
        self.backend = backend
        self.checkpoints = checkpoints
    }

    /// Inserts or replaces the product with the same product id.
    public func putProduct(_ p: Product, logging: AdminAction?) async throws {
        try await backend.transaction { [checkpoints] c in
            try await c.checkedQuery(
                """
                INSERT INTO products (product_id, bundle_id, type, asset_ids, title, updated_at, family_shareable, duration_seconds)
                VALUES (\(p.productId), \(p.bundleId), \(p.type.rawValue), \(p.assetIds), \(p.title), \(p.updatedAt.timeIntervalSince1970),
                  \(p.familyShareable), \(p.durationSeconds))
                ON CONFLICT (product_id) DO UPDATE SET bundle_id = excluded.bundle_id, type = excluded.type, asset_ids = excluded.asset_ids,
                  title = excluded.title, updated_at = excluded.updated_at, family_shareable = excluded.family_shareable,
                  duration_seconds = excluded.duration_seconds
                """, logger: backend.logger)
            try await PostgresChain.log(c, logging, policy: checkpoints, logger: backend.logger)
        }
    }

    public func product(_ productId: String) async throws -> Product? {
        try await backend.read { c in
            try await c.rows("SELECT * FROM products WHERE product_id = \(productId)", logger: backend.logger, Self.product).first
        }
    }

    /// All products, sorted by product id.
    public func products() async throws -> [Product] {
        try await backend.read { c in try await c.rows("SELECT * FROM products ORDER BY product_id", logger: backend.logger, Self.product) }
    }

    public func deleteProduct(_ productId: String, logging: AdminAction?) async throws -> Bool {
        try await backend.transaction { [checkpoints] c in
            guard
                !(try await c.column(
                    "DELETE FROM products WHERE product_id = \(productId) RETURNING product_id", String.self, logger: backend.logger)).isEmpty
            else { return false }
            try await PostgresChain.log(c, logging, policy: checkpoints, logger: backend.logger)
            return true
        }
    }

    /// Stores version `max(version) + 1` of an asset (1 for a new asset). Instances adding a
    /// version of the same asset at once are serialised by an advisory lock on its id.
    public func addAssetVersion(
        assetId: String, name: String, contentType: String, size: Int64, sha256: String, at: Date, logging: AssetLogging?
    ) async throws -> Asset {
        try await backend.transaction { [checkpoints] c in
            try await c.checkedQuery("SELECT pg_advisory_xact_lock(hashtextextended(\("asset:" + assetId), 0))", logger: backend.logger)
            let versions = try await c.column(
                """
                INSERT INTO assets (asset_id, version, name, content_type, size, sha256, created_at)
                SELECT \(assetId), coalesce(max(version), 0) + 1, \(name), \(contentType), \(size), \(sha256), \(at.timeIntervalSince1970)
                FROM assets WHERE asset_id = \(assetId)
                RETURNING version
                """, Int32.self, logger: backend.logger)
            guard let version = versions.first else { throw PostgresStoreError.invalidValue(column: "assets.version", value: "none returned") }
            let asset = Asset(
                assetId: assetId, version: Int(version), name: name, contentType: contentType, size: size, sha256: sha256, createdAt: at)
            try await PostgresChain.log(c, logging?(asset), policy: checkpoints, logger: backend.logger)
            return asset
        }
    }

    /// The latest version of an asset.
    public func asset(_ assetId: String) async throws -> Asset? {
        try await backend.read { c in
            try await c.rows(
                "SELECT * FROM assets WHERE asset_id = \(assetId) ORDER BY version DESC LIMIT 1", logger: backend.logger, Self.asset
            ).first
        }
    }

    public func versions(of assetId: String) async throws -> [Asset] {
        try await backend.read { c in
            try await c.rows("SELECT * FROM assets WHERE asset_id = \(assetId) ORDER BY version DESC", logger: backend.logger, Self.asset)
        }
    }

    /// The latest version of every asset, sorted by asset id.
    public func assets() async throws -> [Asset] {
        try await backend.read { c in
            try await c.rows("SELECT DISTINCT ON (asset_id) * FROM assets ORDER BY asset_id, version DESC", logger: backend.logger, Self.asset)
        }
    }

    public func referencedDigests() async throws -> Set<String> {
        try await backend.read { c in Set(try await c.column("SELECT DISTINCT sha256 FROM assets", String.self, logger: backend.logger)) }
    }

    static func product(_ row: PostgresRandomAccessRow) throws -> Product {
        let type = try row.value("type", String.self)
        guard let known = ProductType(rawValue: type) else { throw PostgresStoreError.invalidValue(column: "products.type", value: type) }
        return Product(
            productId: try row.value("product_id"), bundleId: try row.value("bundle_id"), type: known, assetIds: try row.value("asset_ids"),
            title: try row.value("title"), updatedAt: try row.date("updated_at"), familyShareable: try row.value("family_shareable"),
            durationSeconds: try row.value("duration_seconds"))
    }

    static func asset(_ row: PostgresRandomAccessRow) throws -> Asset {
        Asset(
            assetId: try row.value("asset_id"), version: Int(try row.value("version", Int32.self)), name: try row.value("name"),
            contentType: try row.value("content_type"), size: try row.value("size"), sha256: try row.value("sha256"),
            createdAt: try row.date("created_at"))
    }
}

extension PostgresCatalogue: ContentPinRepository {
    public func pinnedTag(location: String, sha256: String) async throws -> String? {
        try await backend.read { c in
            try await c.column(
                "SELECT tag FROM content_pins WHERE location = \(location) AND sha256 = \(sha256) ORDER BY pin_id DESC LIMIT 1", String.self,
                logger: backend.logger
            ).first
        }
    }

    public func pin(location: String, sha256: String, tag: String, at: Date) async throws {
        try await backend.transaction { c in
            _ = try await c.checkedQuery(
                "INSERT INTO content_pins (location, sha256, tag, pinned_at) VALUES (\(location), \(sha256), \(tag), \(at.timeIntervalSince1970))",
                logger: backend.logger)
        }
    }
}
