import CofferCore
import Foundation

/// In-memory key store. As in SQLite, a key id or secret hash is never reused: creating a
/// second key with either throws, and a revoked key stays (with its first revocation time).
public actor InMemoryKeys: KeyRepository {
    private var keys: [APIKey] = []

    public init() {}

    public func create(_ key: APIKey) throws {
        if keys.contains(where: { $0.keyId.sameBytes(key.keyId) || $0.secretHash.sameBytes(key.secretHash) }) {
            throw InMemoryStorageError.duplicate("key \(key.keyId)")
        }
        keys.append(key)
    }

    public func key(secretHash: String) -> APIKey? { keys.first { $0.secretHash.sameBytes(secretHash) } }

    public func live() -> [APIKey] { keys.filter { $0.revokedAt == nil } }

    public func sign(keyId: String, signature: String) -> Bool {
        guard let index = keys.firstIndex(where: { $0.keyId.sameBytes(keyId) && $0.signature == nil }) else { return false }
        keys[index].signature = signature
        return true
    }

    public func revoke(keyId: String, at: Date) -> Bool {
        guard let index = keys.firstIndex(where: { $0.keyId.sameBytes(keyId) && $0.revokedAt == nil }) else { return false }
        keys[index].revokedAt = at
        return true
    }
}
