import CofferCore
import Foundation
import GRDB

/// A row of `assets`: one version of one asset.
struct AssetRecord: FetchableRecord, PersistableRecord, Sendable {
    static let databaseTableName = "assets"

    /// The columns of `assets`.
    enum Columns {
        static let assetId = Column("asset_id")
        static let version = Column("version")
        static let name = Column("name")
        static let contentType = Column("content_type")
        static let size = Column("size")
        static let sha256 = Column("sha256")
        static let createdAt = Column("created_at")
    }

    var asset: Asset

    init(_ asset: Asset) { self.asset = asset }

    init(row: Row) throws {
        asset = Asset(
            assetId: try row.decode(forColumn: Columns.assetId), version: try row.decode(forColumn: Columns.version),
            name: try row.decode(forColumn: Columns.name), contentType: try row.decode(forColumn: Columns.contentType),
            size: try row.decode(forColumn: Columns.size), sha256: try row.decode(forColumn: Columns.sha256),
            createdAt: try row.date(Columns.createdAt))
    }

    func encode(to container: inout PersistenceContainer) throws {
        container[Columns.assetId] = asset.assetId
        container[Columns.version] = asset.version
        container[Columns.name] = asset.name
        container[Columns.contentType] = asset.contentType
        container[Columns.size] = asset.size
        container[Columns.sha256] = asset.sha256
        container[Columns.createdAt] = asset.createdAt.unixSeconds
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
