import CofferCore
import CofferTestSupport
import Crypto
import Foundation
import Synchronization
import Testing

/// The database audit checks the catalogue against the chained admin log: a catalogue changed
/// through the repositories with its entries verifies; one changed behind their back — an
/// asset version pointing at another asset's bytes, a product given another's assets, a
/// product inserted or deleted, a version deleted — is named, row by row.
@Suite("Catalogue audit contract")
struct CatalogueAuditContractTests {
    static let signer = LedgerSigner(privateKey: .init())

    @Test("a logged catalogue verifies; every row changed behind the repositories' back is named", arguments: [Backend.sqlite, .postgres])
    func tamperedCatalogueIsNamed(backend: Backend) async throws {
        try await backend.withStorage(signer: Self.signer, checkpointEvery: 4) { storage async throws in
            let audit = try #require(storage.audit)
            let execute = try #require(storage.execute)
            let catalogue = storage.catalogue
            func upload(_ id: String, _ bytes: String) async throws -> Asset {
                try await catalogue.addLoggedAssetVersion(
                    assetId: id, name: id, contentType: "application/json", size: Int64(bytes.utf8.count), sha256: fakeHash(bytes), at: instant(1))
            }
            func product(_ id: String, _ assets: [String], family: Bool = false) -> Product {
                Product(
                    productId: id, bundleId: "com.example.app", type: .nonConsumable, assetIds: assets, title: id, updatedAt: instant(2),
                    familyShareable: family)
            }
            _ = try await upload("level-1", "cheap level")
            let premium = try await upload("premium", "premium level")
            _ = try await upload("level-2", "second level")
            _ = try await upload("level-2", "second level, fixed")
            try await catalogue.putLoggedProduct(product("cheap", ["level-1"]))
            try await catalogue.putLoggedProduct(product("premium-pack", ["premium"]))
            try await catalogue.putLoggedProduct(product("old", ["level-2"]))
            #expect(
                try await catalogue.deleteProduct(
                    "old",
                    logging: .init(
                        at: instant(3), keyId: "k", keyName: "Ops", action: .productDelete, target: "old", detail: "", clientAddress: "local")))
            try await catalogue.putLoggedProduct(product("renamed", ["level-2"]))
            // A change the log does not back in the title only: not what a purchase unlocks.
            try await execute("UPDATE products SET title = 'Renamed again' WHERE product_id = 'renamed'")

            let clean = try await audit(Self.signer.publicKey)
            #expect(clean.intact, "\(String(describing: clean.problem))")
            #expect(clean.catalogue.isEmpty, "\(clean.catalogue)")

            let arrays = backend == .postgres
            try await execute(
                [
                    // The cheap level's row now names the premium bytes.
                    "UPDATE assets SET sha256 = '\(premium.sha256)' WHERE asset_id = 'level-1'",
                    // The cheap product unlocks the premium level too, and is family-shareable.
                    arrays
                        ? "UPDATE products SET asset_ids = '{level-1,premium}', family_shareable = true WHERE product_id = 'cheap'"
                        : "UPDATE products SET asset_ids = '[\"level-1\",\"premium\"]', family_shareable = 1 WHERE product_id = 'cheap'",
                    "INSERT INTO products (product_id, bundle_id, type, asset_ids, title, updated_at, family_shareable) VALUES ('forged', 'com.example.app', 'nonConsumable', \(arrays ? "'{premium}'" : "'[\"premium\"]'"), 'Free', 0, \(arrays ? "false" : "0"))",
                    "DELETE FROM products WHERE product_id = 'premium-pack'",
                    // The fix of level 2 rolled back to its first version.
                    "DELETE FROM assets WHERE asset_id = 'level-2' AND version = 2",
                ].joined(separator: "; "))
            let report = try await audit(Self.signer.publicKey)
            #expect(report.problem?.kind == .catalogueUnbacked, "\(String(describing: report.problem))")
            let found = report.catalogue.map { "\($0.kind.rawValue) \($0.id)\($0.version.map { " v\($0)" } ?? "")" }
            #expect(
                Set(found) == [
                    "assetVersionChanged level-1 v1", "productChanged cheap", "productUnlogged forged", "productRemoved premium-pack",
                    "assetVersionRemoved level-2 v2",
                ], "\(report.catalogue)")
            #expect(found.count == 5, "each row named once: \(found)")
            let changed = try #require(report.catalogue.first { $0.kind == .assetVersionChanged })
            #expect(changed.stored?.contains(premium.sha256) == true && changed.logged.first?.contains(fakeHash("cheap level")) == true)
            let cheap = try #require(report.catalogue.first { $0.kind == .productChanged })
            #expect(cheap.stored == "bundle com.example.app, nonConsumable, family-shareable, assets level-1 premium", "\(cheap)")
            #expect(cheap.logged == ["bundle com.example.app, nonConsumable, assets level-1"])
            // The chain itself still verifies: the catalogue is the only problem.
            #expect(report.entries == clean.entries && report.checkpointsVerified == clean.checkpointsVerified)

            // An unreadable row is named, not a failed audit.
            try await execute(
                arrays
                    ? "ALTER TABLE products DROP CONSTRAINT products_type_check; UPDATE products SET type = 'subscription' WHERE product_id = 'forged'"
                    : "PRAGMA ignore_check_constraints = ON; UPDATE products SET type = 'subscription' WHERE product_id = 'forged'; PRAGMA ignore_check_constraints = OFF"
            )
            let unreadable = try await audit(Self.signer.publicKey)
            #expect(unreadable.catalogue.contains { $0.kind == .productUnreadable && $0.id == "forged" }, "\(unreadable.catalogue)")

            // The operator vouches for the catalogue as it stands: each row logged, the
            // unreadable one left to mend; the adoption counts them in its own entry.
            let adopt = try #require(storage.adoptCatalogue)
            let actor = AdminAction(
                at: instant(9), keyId: "cli", keyName: "local user operator", action: .ledgerAdopt, target: "", detail: "", clientAddress: "local")
            let adoption = try await adopt(actor)
            #expect(adoption.catalogue.count == 5, "\(adoption.catalogue)")
            #expect(
                adoption.action.detail.hasSuffix(
                    "vouched for the catalogue: 1 assetVersionChanged, 1 assetVersionRemoved, 1 productChanged, 1 productRemoved; 1 unreadable product rows left"
                ), "\(adoption.action.detail)")
            let logged = try await storage.adminLog.actions(after: 0, limit: 100).suffix(6).map { "\($0.action) \($0.target)" }
            #expect(
                logged == [
                    "product.put cheap", "asset.forget level-1", "asset.upload level-1", "product.delete premium-pack", "asset.forget level-2",
                    "ledger.adopt ledger",
                ], "\(logged)")
            let vouched = try await audit(Self.signer.publicKey)
            #expect(vouched.catalogue.map(\.kind) == [.productUnreadable], "\(vouched.catalogue)")
            #expect(vouched.problem?.kind == .catalogueUnbacked)
            try await execute("DELETE FROM products WHERE product_id = 'forged'")
            let mended = try await audit(Self.signer.publicKey)
            #expect(mended.intact, "\(String(describing: mended.problem))")
            #expect(mended.adoptions.count == 1 && mended.entries == clean.entries + 6)
        }
    }

    /// A view in the catalogue's place (it could show the audit one list and the server
    /// another: by isolation level, session or time) is a schema alteration, named.
    @Test("a view in place of a catalogue table is named", arguments: [Backend.sqlite, .postgres])
    func aViewInPlaceOfTheCatalogueIsNamed(backend: Backend) async throws {
        try await backend.withStorage(signer: Self.signer) { storage async throws in
            let audit = try #require(storage.audit)
            let execute = try #require(storage.execute)
            #expect(try await audit(Self.signer.publicKey).intact)
            try await execute("ALTER TABLE products RENAME TO products_stored; CREATE VIEW products AS SELECT * FROM products_stored")
            let viewed = try await audit(Self.signer.publicKey)
            #expect(viewed.problem?.kind == .schemaAltered, "\(String(describing: viewed.problem))")
            #expect(viewed.problem?.detail.contains("products is not a plain table") == true, "\(String(describing: viewed.problem))")
            if backend == .postgres {
                try await execute("DROP VIEW products; ALTER TABLE products_stored RENAME TO products; ALTER TABLE assets ENABLE ROW LEVEL SECURITY")
                let secured = try await audit(Self.signer.publicKey)
                #expect(secured.problem?.detail.contains("assets is not a plain table") == true, "\(String(describing: secured.problem))")
            }
        }
    }

    /// What the server serves: each row its cache reads is checked against the chained admin
    /// log. A change an admin makes on one instance is served by another at once; a row changed
    /// behind the repositories' back is refused (not cached) until put back; an admin-log entry
    /// edited to match it backs nothing.
    @Test("the server serves only rows the chained admin log backs, whichever instance logged them", arguments: [Backend.sqlite, .postgres])
    func servedOnlyWhenBacked(backend: Backend) async throws {
        try await backend.withStorage(signer: Self.signer, checkpointEvery: 3) { storage async throws in
            let execute = try #require(storage.execute)
            let source = try #require(storage.ledgerAudit as? any CatalogueLogSource)
            let reports = Mutex<[String]>([])
            // An instance's catalogue: every read goes to the store (maxAge zero).
            func instance() -> CachedCatalogue {
                CachedCatalogue(
                    storage.catalogue, maxAge: .zero,
                    backing: CatalogueBacking(source, publicKey: Self.signer.publicKey) { line in reports.withLock { $0.append(line) } })
            }
            func product(_ assets: [String]) -> Product {
                Product(
                    productId: "cheap", bundleId: "com.example.app", type: .nonConsumable, assetIds: assets, title: "Cheap", updatedAt: instant(2))
            }
            let a = instance()
            let b = instance()
            for (id, bytes) in [("level-1", "cheap level"), ("premium", "premium level")] {
                _ = try await a.addLoggedAssetVersion(
                    assetId: id, name: id, contentType: "application/json", size: Int64(bytes.utf8.count), sha256: fakeHash(bytes), at: instant(1))
            }
            try await a.putLoggedProduct(product(["level-1"]))
            #expect(try await b.product("cheap")?.assetIds == ["level-1"])
            #expect(try await b.asset("level-1")?.sha256 == fakeHash("cheap level"))
            try await a.putLoggedProduct(product(["level-1", "premium"]))
            #expect(try await b.product("cheap")?.assetIds == ["level-1", "premium"], "logged on another instance: served at once")
            #expect(try await b.unbacked().isEmpty)
            #expect(reports.withLock { $0 }.isEmpty)

            let arrays = backend == .postgres
            // The insider's statement giving the pack `assets` (ids without quotes or commas).
            func setAssets(_ assets: [String]) -> String {
                let list = arrays ? "{\(assets.joined(separator: ","))}" : "[\(assets.map { "\"\($0)\"" }.joined(separator: ","))]"
                return "UPDATE products SET asset_ids = '\(list)' WHERE product_id = 'cheap'"
            }
            func pointLevel(at bytes: String) -> String { "UPDATE assets SET sha256 = '\(fakeHash(bytes))' WHERE asset_id = 'level-1'" }
            try await execute([setAssets(["premium"]), pointLevel(at: "premium level")].joined(separator: "; "))
            for _ in 0..<2 {
                let product = await #expect(throws: CatalogueBacking.Unbacked.self) { _ = try await b.product("cheap") }
                #expect(product?.finding.kind == .productChanged, "\(String(describing: product))")
                let asset = await #expect(throws: CatalogueBacking.Unbacked.self) { _ = try await b.asset("level-1") }
                #expect(asset?.finding.kind == .assetVersionChanged, "\(String(describing: asset))")
            }
            #expect(try await b.unbacked().map(\.kind) == [.productChanged, .assetVersionChanged])
            #expect(reports.withLock { $0 }.count == 2, "each refused row reported once: \(reports.withLock { $0 })")

            // Put back: served again (a refusal is not cached).
            try await execute([setAssets(["level-1", "premium"]), pointLevel(at: "cheap level")].joined(separator: "; "))
            #expect(try await b.product("cheap")?.assetIds == ["level-1", "premium"])
            #expect(try await b.asset("level-1")?.sha256 == fakeHash("cheap level"))

            // The insider edits the pack's last logged put to match the row they want served.
            let put = CatalogueLog.productDetail(product(["premium"])).replacingOccurrences(of: "'", with: "''")
            try await execute(
                [
                    arrays
                        ? "ALTER TABLE admin_actions DISABLE TRIGGER admin_actions_append_only"
                        : "DROP TRIGGER admin_actions_no_update",
                    "UPDATE admin_actions SET detail = '\(put)' WHERE sequence = (SELECT max(sequence) FROM admin_actions WHERE action = 'product.put')",
                    setAssets(["premium"]),
                ].joined(separator: "; "))
            // An instance that read the entry before the edit keeps what the key signed.
            let kept = await #expect(throws: CatalogueBacking.Unbacked.self) { _ = try await b.product("cheap") }
            #expect(kept?.finding.kind == .productChanged)
            // One that starts now finds the log does not verify: it serves nothing from the catalogue.
            let c = instance()
            let edited = await #expect(throws: CatalogueBacking.LogBroken.self, "a new instance") { _ = try await c.product("cheap") }
            #expect(edited?.failure.reason.contains("do not hash to what the checkpoint at") == true, "\(String(describing: edited))")
            await #expect(throws: CatalogueBacking.LogBroken.self) { _ = try await c.asset("premium") }
            await #expect(throws: CatalogueBacking.LogBroken.self) { _ = try await c.unbacked() }
            #expect(
                reports.withLock { $0 }.contains { $0.hasPrefix("the admin log does not verify at chain entry ") },
                "\(reports.withLock { $0 })")
        }
    }
}
