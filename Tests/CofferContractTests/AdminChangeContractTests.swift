import CofferCore
import CofferTestSupport
import Crypto
import Foundation
import Testing

/// An admin change (catalogue, keys, an admin's revocation) given its admin-log entry stores
/// both in one transaction: an auditor never meets a change the log does not show, even when
/// the log's write fails after the change's.
@Suite("Admin change contract")
struct AdminChangeContractTests {
    static let signer = LedgerSigner(privateKey: .init())

    static func entry(_ action: AdminActionName, _ target: String, _ detail: String = "", at offset: Double = 50) -> AdminAction {
        AdminAction(
            at: instant(offset), keyId: "k-admin", keyName: "Ops", action: action, target: target, detail: detail, clientAddress: "192.0.2.9")
    }

    static func product(_ id: String, title: String = "Pack") -> Product {
        Product(productId: id, bundleId: "com.example.app", type: .nonConsumable, assetIds: ["level-1"], title: title, updatedAt: instant(1))
    }

    static func key(_ id: String, signed: Bool = true) -> APIKey {
        APIKey(
            keyId: id, name: "key \(id)", role: .auditor, secretHash: fakeHash("secret-\(id)"), createdAt: instant(2),
            signature: signed ? "signature-\(id)" : nil)
    }

    static func revocation(_ transactionId: String) -> Revocation {
        Revocation(
            redemptionId: "", transactionId: transactionId, revokedAt: instant(60), reason: "abuse", source: .admin, reference: "Ops",
            recordedAt: instant(60), environment: "Sandbox", replayKey: transactionId)
    }

    static func uploadEntry(_ asset: Asset) -> AdminAction {
        entry(.assetUpload, asset.assetId, "version \(asset.version)")
    }

    /// The actions stored, as (action, target, detail).
    static func logged(_ storage: ContractStorage) async throws -> [[String]] {
        try await storage.adminLog.actions(after: 0, limit: 100).map { [$0.action, $0.target, $0.detail] }
    }

    @Test("each logged change stores its entry; a change that changes nothing logs nothing", arguments: Backend.allCases)
    func loggedChanges(backend: Backend) async throws {
        try await backend.withStorage(signer: Self.signer, checkpointEvery: 3) { storage async throws in
            let catalogue = storage.catalogue
            let keys = storage.keys
            let asset = try await catalogue.addAssetVersion(
                assetId: "level-1", name: "Level 1", contentType: "application/octet-stream", size: 10, sha256: fakeHash("a"), at: instant(0),
                logging: Self.uploadEntry)
            #expect(asset.version == 1)
            try await catalogue.putProduct(Self.product("p1"), logging: Self.entry(.productPut, "p1", "first"))
            try await catalogue.putProduct(Self.product("p1", title: "Renamed"), logging: Self.entry(.productPut, "p1", "second"))
            #expect(try await catalogue.deleteProduct("p1", logging: Self.entry(.productDelete, "p1")))
            try await keys.create(Self.key("k1"), logging: Self.entry(.keyCreate, "key k1"))
            try await keys.create(Self.key("k2", signed: false), logging: Self.entry(.keyCreate, "key k2"))
            #expect(try await keys.sign(keyId: "k2", signature: "signed-later", logging: Self.entry(.keyCreate, "key k2", "adopted")))
            #expect(try await keys.revoke(keyId: "k1", at: instant(70), logging: Self.entry(.keyRevoke, "key k1")))
            let redemption = try #require(try await storage.ledger.insert(makeRedemption("900")).inserted)
            #expect(
                try await storage.ledger.revoke(Self.revocation("900"), keepUnredeemed: false, logging: Self.entry(.redemptionRevoke, "900", "abuse"))
                    .isStored)
            let again = PurchaseEvent(
                at: instant(80), kind: .revokedAgain, environment: "Sandbox", replayKey: "900", redemptionId: redemption.redemptionId,
                transactionId: "900", detail: "abuse", source: .admin, reference: "Ops")
            guard case .appended = try await storage.ledger.append(again, logging: Self.entry(.redemptionRevoke, "900", "again")) else {
                Issue.record("the event was not appended")
                return
            }
            let expected = [
                ["asset.upload", "level-1", "version 1"], ["product.put", "p1", "first"], ["product.put", "p1", "second"],
                ["product.delete", "p1", ""],
                ["key.create", "key k1", ""], ["key.create", "key k2", ""], ["key.create", "key k2", "adopted"], ["key.revoke", "key k1", ""],
                ["redemption.revoke", "900", "abuse"], ["redemption.revoke", "900", "again"],
            ]
            #expect(try await Self.logged(storage) == expected)

            // Nothing changed: nothing logged.
            #expect(try await !catalogue.deleteProduct("p1", logging: Self.entry(.productDelete, "p1")))
            #expect(try await !keys.revoke(keyId: "k1", at: instant(90), logging: Self.entry(.keyRevoke, "key k1")), "revoked already")
            #expect(try await !keys.revoke(keyId: "missing", at: instant(90), logging: Self.entry(.keyRevoke, "missing")))
            #expect(try await !keys.sign(keyId: "k2", signature: "again", logging: Self.entry(.keyCreate, "key k2")), "signed already")
            #expect(
                try await storage.ledger.revoke(Self.revocation("900"), keepUnredeemed: false, logging: Self.entry(.redemptionRevoke, "900"))
                    == .alreadyRevoked)
            #expect(
                try await storage.ledger.revoke(Self.revocation("901"), keepUnredeemed: false, logging: Self.entry(.redemptionRevoke, "901"))
                    == .notRedeemed)
            #expect(try await Self.logged(storage) == expected)

            // Every entry is chained after its change, and the chain verifies under the seal.
            let kinds = try await storage.ledgerAudit.chainedEntries(after: 0, limit: 100).map(\.entry.kind)
            #expect(kinds == Array(repeating: .adminAction, count: 8) + [.redemption, .revocation, .adminAction, .purchaseEvent, .adminAction])
            try await storage.ledgerAudit.sealIntact()
            let report = LedgerExport.verify(
                try await LedgerAuditContractTests.export(storage.ledgerAudit, publicKey: Self.signer.publicKey), publicKey: Self.signer.publicKey)
            #expect(report.intact, "\(String(describing: report.problem))")
            #expect(report.entries == 13)
        }
    }

    @Test("when the entry cannot be stored, the change is not made either", arguments: Backend.allCases)
    func noChangeWithoutItsEntry(backend: Backend) async throws {
        try await backend.withStorage(signer: Self.signer) { storage async throws in
            let catalogue = storage.catalogue
            let keys = storage.keys
            _ = try await catalogue.addAssetVersion(
                assetId: "level-1", name: "Level 1", contentType: "application/octet-stream", size: 10, sha256: fakeHash("a"), at: instant(0))
            try await catalogue.putProduct(Self.product("kept"))
            try await keys.create(Self.key("live"))
            try await keys.create(Self.key("unsigned", signed: false))
            let redemption = try #require(try await storage.ledger.insert(makeRedemption("900")).inserted)
            let events = try await storage.ledger.purchaseEvents(environment: "Sandbox", replayKey: "900")
            let head = try await storage.ledgerAudit.chainedEntries(after: 0, limit: 100).count

            try await storage.failAdminLogWrites(true)
            await #expect(throws: (any Error).self) {
                _ = try await catalogue.addAssetVersion(
                    assetId: "level-1", name: "Level 1", contentType: "application/octet-stream", size: 11, sha256: fakeHash("b"), at: instant(1),
                    logging: Self.uploadEntry)
            }
            await #expect(throws: (any Error).self) { try await catalogue.putProduct(Self.product("new"), logging: Self.entry(.productPut, "new")) }
            await #expect(throws: (any Error).self) {
                try await catalogue.putProduct(Self.product("kept", title: "Changed"), logging: Self.entry(.productPut, "kept"))
            }
            await #expect(throws: (any Error).self) { _ = try await catalogue.deleteProduct("kept", logging: Self.entry(.productDelete, "kept")) }
            await #expect(throws: (any Error).self) { try await keys.create(Self.key("new"), logging: Self.entry(.keyCreate, "new")) }
            await #expect(throws: (any Error).self) {
                _ = try await keys.revoke(keyId: "live", at: instant(70), logging: Self.entry(.keyRevoke, "live"))
            }
            await #expect(throws: (any Error).self) {
                _ = try await keys.sign(keyId: "unsigned", signature: "s", logging: Self.entry(.keyCreate, "unsigned"))
            }
            await #expect(throws: (any Error).self) {
                _ = try await storage.ledger.revoke(Self.revocation("900"), keepUnredeemed: false, logging: Self.entry(.redemptionRevoke, "900"))
            }
            let again = PurchaseEvent(
                at: instant(80), kind: .revokedAgain, environment: "Sandbox", replayKey: "900", redemptionId: redemption.redemptionId,
                transactionId: "900", detail: "abuse", source: .admin, reference: "Ops")
            await #expect(throws: (any Error).self) { _ = try await storage.ledger.append(again, logging: Self.entry(.redemptionRevoke, "900")) }

            // Nothing of any of them was stored.
            #expect(try await catalogue.versions(of: "level-1").map(\.version) == [1])
            #expect(try await catalogue.product("new") == nil)
            #expect(try await catalogue.product("kept") == Self.product("kept"))
            #expect(try await keys.key(secretHash: fakeHash("secret-new")) == nil)
            #expect(try await keys.key(secretHash: fakeHash("secret-live"))?.revokedAt == nil)
            #expect(try await keys.key(secretHash: fakeHash("secret-unsigned"))?.signature == nil)
            #expect(try await storage.ledger.revocation(of: redemption) == nil)
            #expect(try await storage.ledger.purchaseEvents(environment: "Sandbox", replayKey: "900") == events)
            #expect(try await storage.adminLog.actions(after: 0, limit: 10).isEmpty)
            #expect(try await storage.ledgerAudit.chainedEntries(after: 0, limit: 100).count == head)

            // The log back: the same change goes through, with its entry.
            try await storage.failAdminLogWrites(false)
            try await catalogue.putProduct(Self.product("kept", title: "Changed"), logging: Self.entry(.productPut, "kept"))
            #expect(try await catalogue.product("kept")?.title == "Changed")
            #expect(try await Self.logged(storage) == [["product.put", "kept", ""]])
            try await storage.ledgerAudit.sealIntact()
        }
    }
}

extension RevocationOutcome {
    /// Whether a revocation was stored.
    fileprivate var isStored: Bool {
        switch self {
        case .revoked, .recordedUnredeemed: true
        case .alreadyRevoked, .notRedeemed: false
        }
    }
}
