import CofferCore
import CofferTestSupport
import Foundation
import Testing

/// ``CatalogueRepository``: products and versioned assets.
@Suite("Catalogue contract")
struct CatalogueContractTests {
    @Test("products: put, get, replace, list sorted, delete", arguments: Backend.allCases)
    func productCRUD(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let catalogue = storage.catalogue
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

    @Test("ids are compared and sorted byte for byte, as SQL compares text", arguments: Backend.allCases)
    func idsAreBytes(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let catalogue = storage.catalogue
            // "é" precomposed and decomposed: one String to Swift, two ids to a database.
            let ids = ["caf\u{E9}", "cafe\u{301}", "Zed", "a"]
            for id in ids {
                try await catalogue.putProduct(
                    Product(productId: id, bundleId: "com.example.app", type: .consumable, assetIds: [], title: id, updatedAt: instant(0)))
            }
            let listed = try await catalogue.products().map(\.productId)
            #expect(listed.map { Array($0.utf8) } == ids.map { Array($0.utf8) }.sorted { $0.lexicographicallyPrecedes($1) })
            #expect(try await catalogue.product("caf\u{E9}").map { Array($0.title.utf8) } == Array("caf\u{E9}".utf8))
            #expect(try await catalogue.product("cafe\u{301}").map { Array($0.title.utf8) } == Array("cafe\u{301}".utf8))
            #expect(try await catalogue.deleteProduct("cafe\u{301}"))
            #expect(try await catalogue.product("caf\u{E9}") != nil, "deleting one form leaves the other")
        }
    }

    /// Uploads of three assets, one of them twice.
    static let uploads: [(id: String, name: String, size: Int64, at: Double)] = [
        ("wallpapers", "wallpapers-v1.zip", 10, 0), ("fonts", "fonts.zip", 20, 1), ("wallpapers", "wallpapers-v2.zip", 30, 2),
        ("avatars", "avatars.zip", 0, 3),
    ]

    @Test("assets: a re-upload is version 2, asset() and assets() return latest versions", arguments: Backend.allCases)
    func assetVersioning(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let catalogue = storage.catalogue
            var stored: [Asset] = []
            for upload in Self.uploads {
                let asset = try await catalogue.addAssetVersion(
                    assetId: upload.id, name: upload.name, contentType: "application/zip", size: upload.size, sha256: fakeHash(upload.name),
                    at: instant(upload.at))
                stored.append(asset)
            }
            // Every field as given, the version counted per asset.
            #expect(
                stored
                    == Self.uploads.enumerated().map { index, upload in
                        Asset(
                            assetId: upload.id, version: index == 2 ? 2 : 1, name: upload.name, contentType: "application/zip", size: upload.size,
                            sha256: fakeHash(upload.name), createdAt: instant(upload.at))
                    })
            let latest = try #require(try await catalogue.asset("wallpapers"))
            #expect(latest.version == 2)
            #expect(latest.name == "wallpapers-v2.zip")
            #expect(latest == stored[2])
            #expect(try await catalogue.asset("missing") == nil)
            let all = try await catalogue.assets()
            #expect(all.map(\.assetId) == ["avatars", "fonts", "wallpapers"])
            #expect(all.map(\.version) == [1, 1, 2])
            #expect(all == [stored[3], stored[1], stored[2]])
            // Every version of one asset, newest first; none of an unknown one.
            #expect(try await catalogue.versions(of: "wallpapers") == [stored[2], stored[0]])
            #expect(try await catalogue.versions(of: "fonts") == [stored[1]])
            #expect(try await catalogue.versions(of: "missing").isEmpty)
            // Every version's digest is referenced, the replaced one too.
            #expect(try await catalogue.referencedDigests() == Set(Self.uploads.map { fakeHash($0.name) }))
        }
    }

    @Test("an asset with a digest that is not 64 characters, or a negative size, is refused", arguments: Backend.allCases)
    func assetConstraints(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let catalogue = storage.catalogue
            await #expect(throws: (any Error).self) {
                _ = try await catalogue.addAssetVersion(
                    assetId: "a", name: "a", contentType: "text/plain", size: 1, sha256: "abc", at: instant(0))
            }
            await #expect(throws: (any Error).self) {
                _ = try await catalogue.addAssetVersion(
                    assetId: "a", name: "a", contentType: "text/plain", size: -1, sha256: fakeHash("a"), at: instant(0))
            }
            #expect(try await catalogue.asset("a") == nil)
            let first = try await catalogue.addAssetVersion(
                assetId: "a", name: "a", contentType: "text/plain", size: 1, sha256: fakeHash("a"), at: instant(0))
            #expect(first.version == 1, "refused versions take no number")
        }
    }

    @Test("concurrent uploads of one asset get distinct consecutive versions", arguments: Backend.allCases)
    func concurrentAssetVersions(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let catalogue = storage.catalogue
            let versions = try await concurrently(16) { index in
                try await catalogue.addAssetVersion(
                    assetId: "shared", name: "v\(index)", contentType: "text/plain", size: 1, sha256: fakeHash("\(index)"), at: instant(0)
                ).version
            }
            #expect(versions.sorted() == Array(1...16))
            #expect(try await catalogue.asset("shared")?.version == 16)
        }
    }
}
