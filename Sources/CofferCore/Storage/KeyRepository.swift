import Foundation

/// Admin and auditor keys, stored hashed.
public protocol KeyRepository: Sendable {
    func create(_ key: APIKey) async throws
    func key(secretHash: String) async throws -> APIKey?
    /// Returns whether a live key was revoked.
    func revoke(keyId: String, at: Date) async throws -> Bool
}
