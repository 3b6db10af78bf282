import Foundation

/// Admin and auditor keys, stored hashed. A key changes only by being revoked once, or (made
/// before keys were signed) by being signed once; it is never deleted.
///
/// A change given `logging` records that entry in the admin log in the same transaction (see
/// ``CatalogueRepository``); nothing is logged when nothing changed.
public protocol KeyRepository: Sendable {
    func create(_ key: APIKey, logging: AdminAction?) async throws
    func key(secretHash: String) async throws -> APIKey?
    /// Returns whether a live key was revoked.
    func revoke(keyId: String, at: Date, logging: AdminAction?) async throws -> Bool
    /// Every live (unrevoked) key, oldest first — to find those the ledger key did not sign.
    func live() async throws -> [APIKey]
    /// Stores `signature` on the key `keyId` if it has none; returns whether it was stored.
    func sign(keyId: String, signature: String, logging: AdminAction?) async throws -> Bool
}

extension KeyRepository {
    /// Inserts a key, logging nothing (tests, the demo's keys).
    public func create(_ key: APIKey) async throws { try await create(key, logging: nil) }
    /// Revokes a live key, logging nothing; returns whether one was revoked.
    public func revoke(keyId: String, at: Date) async throws -> Bool { try await revoke(keyId: keyId, at: at, logging: nil) }
    /// Signs an unsigned key, logging nothing; returns whether the signature was stored.
    public func sign(keyId: String, signature: String) async throws -> Bool { try await sign(keyId: keyId, signature: signature, logging: nil) }
}
