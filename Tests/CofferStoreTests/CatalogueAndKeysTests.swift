import CofferCore
import CofferTestSupport
import Foundation
import Testing

@testable import CofferStore

@Suite("SQLiteCatalogue and SQLiteKeys")
struct CatalogueAndKeysTests {
    @Test("products: put, get, replace, list sorted, delete")
    func productCRUD() async throws {
        try await withDatabase { db in
            let catalogue = SQLiteCatalogue(db)
            let gems = Product(
                productId: "com.example.gems", bundleId: "com.example.app", type: .consumable, assetIds: ["pack-b", "pack-a", "pack \"q\""],
                title: "Gems ✨", updatedAt: instant(0.5))
            let pass = Product(
                productId: "com.example.pass", bundleId: "com.example.app", type: .nonConsumable, assetIds: [], title: "Pass", updatedAt: instant(1))
            try await catalogue.putProduct(pass)
            try await catalogue.putProduct(gems)
            #expect(try await catalogue.product("com.example.gems") == gems)
            #expect(try await catalogue.product("missing") == nil)
            #expect(try await catalogue.products() == [gems, pass])

            var renamed = gems
            renamed.title = "More gems"
            renamed.assetIds = ["pack-c"]
            renamed.updatedAt = instant(2)
            try await catalogue.putProduct(renamed)
            #expect(try await catalogue.product("com.example.gems") == renamed)
            #expect(try await catalogue.products().count == 2)

            #expect(try await catalogue.deleteProduct("com.example.gems"))
            #expect(try await !catalogue.deleteProduct("com.example.gems"))
            #expect(try await catalogue.products() == [pass])
        }
    }

    @Test("assets: a re-upload is version 2, asset() and assets() return latest versions")
    func assetVersioning() async throws {
        try await withDatabase { db in
            let catalogue = SQLiteCatalogue(db)
            let reference = InMemoryCatalogue()
            let uploads: [(id: String, name: String, size: Int64, at: Double)] = [
                ("wallpapers", "wallpapers-v1.zip", 10, 0), ("fonts", "fonts.zip", 20, 1), ("wallpapers", "wallpapers-v2.zip", 30, 2),
                ("avatars", "avatars.zip", 0, 3),
            ]
            var stored: [Asset] = []
            for upload in uploads {
                let hash = fakeHash(upload.name)
                let asset = try await catalogue.addAssetVersion(
                    assetId: upload.id, name: upload.name, contentType: "application/zip", size: upload.size, sha256: hash, at: instant(upload.at))
                let expected = await reference.addAssetVersion(
                    assetId: upload.id, name: upload.name, contentType: "application/zip", size: upload.size, sha256: hash, at: instant(upload.at))
                #expect(asset == expected)
                stored.append(asset)
            }
            #expect(stored.map(\.version) == [1, 1, 2, 1])
            let latest = try #require(try await catalogue.asset("wallpapers"))
            #expect(latest.version == 2)
            #expect(latest.name == "wallpapers-v2.zip")
            #expect(latest == stored[2])
            #expect(try await catalogue.asset("missing") == nil)
            let all = try await catalogue.assets()
            #expect(all.map(\.assetId) == ["avatars", "fonts", "wallpapers"])
            #expect(all.map(\.version) == [1, 1, 2])
            #expect(all == (await reference.assets()))
            #expect(try db.fetchInt(sql: "SELECT COUNT(*) FROM assets") == 4, "old versions are kept")
        }
    }

    @Test("concurrent uploads of one asset get distinct consecutive versions")
    func concurrentAssetVersions() async throws {
        try await withDatabase { db in
            let catalogue = SQLiteCatalogue(db)
            let versions = try await withThrowingTaskGroup(of: Int.self) { group in
                for index in 0..<16 {
                    group.addTask {
                        try await catalogue.addAssetVersion(
                            assetId: "shared", name: "v\(index)", contentType: "text/plain", size: 1, sha256: fakeHash("\(index)"), at: instant(0)
                        ).version
                    }
                }
                var all: [Int] = []
                for try await version in group { all.append(version) }
                return all
            }
            #expect(versions.sorted() == Array(1...16))
            #expect(try await catalogue.asset("shared")?.version == 16)
        }
    }

    @Test("keys: create, look up by secret hash, revoke once")
    func keys() async throws {
        try await withDatabase { db in
            let keys = SQLiteKeys(db)
            let admin = APIKey(keyId: "k-admin", name: "Ops", role: .admin, secretHash: fakeHash("admin-secret"), createdAt: instant(0))
            let auditor = APIKey(keyId: "k-audit", name: "Audit", role: .auditor, secretHash: fakeHash("audit-secret"), createdAt: instant(1))
            try await keys.create(admin)
            try await keys.create(auditor)
            #expect(try await keys.key(secretHash: admin.secretHash) == admin)
            #expect(try await keys.key(secretHash: auditor.secretHash) == auditor)
            #expect(try await keys.key(secretHash: fakeHash("nobody")) == nil)

            #expect(try await keys.revoke(keyId: "k-audit", at: instant(10)))
            #expect(try await !keys.revoke(keyId: "k-audit", at: instant(20)), "already revoked")
            #expect(try await !keys.revoke(keyId: "missing", at: instant(20)))
            let revoked = try #require(try await keys.key(secretHash: auditor.secretHash))
            #expect(revoked.revokedAt == instant(10), "still returned, with the first revocation time")
            #expect(try await keys.key(secretHash: admin.secretHash)?.revokedAt == nil)

            // Never overwritten: a duplicate key id or secret hash is an error.
            var sameId = auditor
            sameId.secretHash = fakeHash("other")
            sameId.revokedAt = nil
            await #expect(throws: (any Error).self) { try await keys.create(sameId) }
            var sameSecret = admin
            sameSecret.keyId = "k-other"
            await #expect(throws: (any Error).self) { try await keys.create(sameSecret) }
            #expect(try await keys.key(secretHash: auditor.secretHash)?.revokedAt == instant(10))
        }
    }
}
