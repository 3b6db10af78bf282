import CofferCore
import Foundation
import GRDB

/// A row of `assets` (migration 0001): one version of one asset.
struct AssetRecord: CodableRecord, PersistableRecord, Sendable {
    static let databaseTableName = "assets"

    /// The columns: the properties' coding keys.
    typealias Columns = CodingKeys
    enum CodingKeys: String, CodingKey, ColumnExpression {
        case assetId = "asset_id", version, name, contentType = "content_type", size, sha256, createdAt = "created_at"
    }

    var assetId: String
    var version: Int
    var name: String
    var contentType: String
    var size: Int64
    var sha256: String
    var createdAt: Date

    /// The row for `asset`.
    init(_ asset: Asset) {
        assetId = asset.assetId
        version = asset.version
        name = asset.name
        contentType = asset.contentType
        size = asset.size
        sha256 = asset.sha256
        createdAt = asset.createdAt
    }

    /// The stored asset.
    var asset: Asset {
        Asset(assetId: assetId, version: version, name: name, contentType: contentType, size: size, sha256: sha256, createdAt: createdAt)
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
