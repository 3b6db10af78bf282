import CofferCore
import CofferTestSupport
import Foundation
import GRDB
import Testing

@testable import CofferStore

/// The Codable records of products, assets and API keys store exactly the values the
/// hand-written mapping stored before them (the SQL below is that mapping's), so a database
/// written by either reads the same under the other.
@Suite("Catalogue and key records")
struct CatalogueRecordTests {
    static let at = Date(timeIntervalSince1970: 1_700_000_000.123456)

    static let products = [
        Product(productId: "com.example.gems", bundleId: "com.example.app", type: .consumable, assetIds: [], title: "Gems", updatedAt: at),
        Product(
            productId: "com.example.pack", bundleId: "com.example.app", type: .nonConsumable, assetIds: ["wall/papers", "fonts", "é\"\\"],
            title: "Pack « ✓ »", updatedAt: at.addingTimeInterval(0.5)),
    ]

    static let asset = Asset(
        assetId: "wallpapers", version: 1, name: "walls.zip", contentType: "application/zip", size: 1 << 40, sha256: fakeHash("walls"),
        createdAt: at)

    static let keys = [
        APIKey(keyId: "k-1", name: "ops", role: .admin, secretHash: fakeHash("s-1"), createdAt: at),
        APIKey(keyId: "k-2", name: "audit", role: .auditor, secretHash: fakeHash("s-2"), createdAt: at, revokedAt: at.addingTimeInterval(60.25)),
    ]

    @Test("products, assets and keys are stored as the hand-written SQL stored them")
    func recordsStoreTheSameValues() async throws {
        let byHand = try await withDatabase { db in
            try await db.pool.write { db in
                for p in Self.products {
                    try db.execute(
                        sql: "INSERT INTO products (product_id, bundle_id, type, asset_ids, title, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                        arguments: [
                            p.productId, p.bundleId, p.type.rawValue, String(decoding: try JSONEncoder().encode(p.assetIds), as: UTF8.self), p.title,
                            p.updatedAt.timeIntervalSince1970,
                        ])
                }
                let a = Self.asset
                try db.execute(
                    sql: "INSERT INTO assets (asset_id, version, name, content_type, size, sha256, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    arguments: [a.assetId, a.version, a.name, a.contentType, a.size, a.sha256, a.createdAt.timeIntervalSince1970])
                for k in Self.keys {
                    try db.execute(
                        sql: "INSERT INTO api_keys (key_id, name, role, secret_hash, created_at, revoked_at) VALUES (?, ?, ?, ?, ?, ?)",
                        arguments: [
                            k.keyId, k.name, k.role.rawValue, k.secretHash, k.createdAt.timeIntervalSince1970, k.revokedAt?.timeIntervalSince1970,
                        ])
                }
                return try Self.storedValues(db)
            }
        }
        let byRecords = try await withDatabase { db in
            let catalogue = SQLiteCatalogue(db)
            for p in Self.products { try await catalogue.putProduct(p) }
            let a = Self.asset
            let stored = try await catalogue.addAssetVersion(
                assetId: a.assetId, name: a.name, contentType: a.contentType, size: a.size, sha256: a.sha256, at: a.createdAt)
            #expect(stored == a)
            let keys = SQLiteKeys(db)
            for k in Self.keys {
                try await keys.create(APIKey(keyId: k.keyId, name: k.name, role: k.role, secretHash: k.secretHash, createdAt: k.createdAt))
                if let revokedAt = k.revokedAt { #expect(try await keys.revoke(keyId: k.keyId, at: revokedAt)) }
            }
            #expect(try await catalogue.products() == Self.products)
            #expect(try await catalogue.asset(a.assetId) == a)
            for k in Self.keys { #expect(try await keys.key(secretHash: k.secretHash) == k) }
            return try await db.pool.read { db in try Self.storedValues(db) }
        }
        #expect(byRecords == byHand)
        #expect(byHand.first?.contains("real \(Self.at.timeIntervalSince1970.bitPattern)") == true)
    }

    @Test("a stored asset list that is not an array of strings is an invalid value, not a decoding error")
    func invalidAssetIdsAreInvalidValues() async throws {
        try await withDatabase { db in
            try db.execute(
                sql: "INSERT INTO products (product_id, bundle_id, type, asset_ids, title, updated_at) VALUES ('p', 'b', 'consumable', '[1]', 't', 0)"
            )
            await #expect(throws: StoreError.invalidValue(column: "asset_ids", value: "[1]")) { _ = try await SQLiteCatalogue(db).product("p") }
        }
    }

    /// Every value of the three tables, exactly: its storage class and, for a REAL, its bit pattern.
    static func storedValues(_ db: Database) throws -> [[String]] {
        try [("products", "product_id"), ("assets", "asset_id, version"), ("api_keys", "key_id")].flatMap { table, order in
            try Row.fetchAll(db, sql: "SELECT * FROM \(table) ORDER BY \(order)").map { row in
                row.databaseValues.map { value in
                    switch value.storage {
                    case .null: "null"
                    case .int64(let n): "integer \(n)"
                    case .double(let x): "real \(x.bitPattern)"
                    case .string(let text): "text \(text)"
                    case .blob(let data): "blob \(data.hexString)"
                    }
                }
            }
        }
    }
}
