import CofferCore
import CofferTestSupport
import Foundation
import Testing

/// ``KeyRepository``: admin and auditor keys, stored hashed.
@Suite("Key contract")
struct KeyContractTests {
    @Test("keys: create, look up by secret hash, revoke once, never overwritten", arguments: Backend.allCases)
    func keys(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let admin = APIKey(keyId: "k-admin", name: "Ops", role: .admin, secretHash: fakeHash("admin-secret"), createdAt: instant(0))
            let auditor = APIKey(keyId: "k-audit", name: "Audit", role: .auditor, secretHash: fakeHash("audit-secret"), createdAt: instant(1))
            try await storage.keys.create(admin)
            try await storage.keys.create(auditor)
            #expect(try await storage.keys.key(secretHash: admin.secretHash) == admin)
            #expect(try await storage.keys.key(secretHash: auditor.secretHash) == auditor)
            #expect(try await storage.keys.key(secretHash: fakeHash("nobody")) == nil)

            #expect(try await storage.keys.revoke(keyId: "k-audit", at: instant(10)))
            #expect(try await !storage.keys.revoke(keyId: "k-audit", at: instant(20)), "already revoked")
            #expect(try await !storage.keys.revoke(keyId: "missing", at: instant(20)))
            let revoked = try #require(try await storage.keys.key(secretHash: auditor.secretHash))
            #expect(revoked.revokedAt == instant(10), "still returned, with the first revocation time")
            #expect(try await storage.keys.key(secretHash: admin.secretHash)?.revokedAt == nil)

            // Never overwritten: a duplicate key id or secret hash is an error.
            var sameId = auditor
            sameId.secretHash = fakeHash("other")
            sameId.revokedAt = nil
            await #expect(throws: (any Error).self) { try await storage.keys.create(sameId) }
            var sameSecret = admin
            sameSecret.keyId = "k-other"
            await #expect(throws: (any Error).self) { try await storage.keys.create(sameSecret) }
            #expect(try await storage.keys.key(secretHash: auditor.secretHash)?.revokedAt == instant(10))
            #expect(try await storage.keys.key(secretHash: fakeHash("other")) == nil)
            #expect(try await storage.keys.revoke(keyId: "k-admin", at: instant(30)), "the original admin key is the one revoked")
        }
    }
}
