import CofferCore
import CofferTestSupport
import Foundation
import Testing

@testable import CofferStore

/// What the storage contract (CofferContractTests) cannot see: the rows the SQLite
/// repositories leave in their tables.
@Suite("SQLite rows")
struct SQLiteRowTests {
    @Test("a replay and a unique collision on another column add no redemption row")
    func refusedInsertsAddNoRow() async throws {
        try await withDatabase { db in
            let ledger = SQLiteLedger(db)
            _ = try await ledger.insert(makeRedemption("1000000001"))
            var replay = makeRedemption("1000000001", at: 99)
            replay.redemptionId = "another-redemption"
            replay.grantHash = fakeHash("another-grant")
            #expect(try await ledger.insert(replay) == .alreadyRedeemed)
            var sameGrant = makeRedemption("1000000002")
            sameGrant.grantHash = makeRedemption("1000000001").grantHash
            await #expect(throws: (any Error).self) { _ = try await ledger.insert(sameGrant) }
            #expect(try db.fetchInt(sql: "SELECT COUNT(*) FROM redemptions") == 1)
            #expect(try db.fetchInt(sql: "SELECT COUNT(*) FROM ledger_events") == 1)
        }
    }

    @Test("every version of an asset is kept as a row")
    func assetVersionsAreRows() async throws {
        try await withDatabase { db in
            let catalogue = SQLiteCatalogue(db)
            for (id, name) in [("wallpapers", "v1"), ("fonts", "f"), ("wallpapers", "v2"), ("avatars", "a")] {
                _ = try await catalogue.addAssetVersion(
                    assetId: id, name: name, contentType: "application/zip", size: 1, sha256: fakeHash(name), at: instant(0))
            }
            #expect(try db.fetchInt(sql: "SELECT COUNT(*) FROM assets") == 4, "old versions are kept")
            #expect(try await catalogue.assets().count == 3)
        }
    }
}
