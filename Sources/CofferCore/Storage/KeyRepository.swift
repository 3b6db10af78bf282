import Foundation

/// Admin and auditor keys, stored hashed. A key changes only by being revoked once, or (made
/// before keys were signed) by being signed once; it is never deleted.
public protocol KeyRepository: Sendable {
    func create(_ key: APIKey) async throws
    func key(secretHash: String) async throws -> APIKey?
    /// Returns whether a live key was revoked.
    func revoke(keyId: String, at: Date) async throws -> Bool
    /// Every live (unrevoked) key, oldest first — to find those the ledger key did not sign.
    func live() async throws -> [APIKey]
    /// Stores `signature` on the key `keyId` if it has none; returns whether it was stored.
    func sign(keyId: String, signature: String) async throws -> Bool
}
