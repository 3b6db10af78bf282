import CofferCore
import Foundation

/// In-memory key store.
public actor InMemoryKeys: KeyRepository {
    private var keys: [String: APIKey] = [:]

    public init() {}

    public func create(_ key: APIKey) { keys[key.keyId] = key }
    public func key(secretHash: String) -> APIKey? { keys.values.first { $0.secretHash == secretHash } }
    public func revoke(keyId: String, at: Date) -> Bool {
        guard var key = keys[keyId], key.revokedAt == nil else { return false }
        key.revokedAt = at
        keys[keyId] = key
        return true
    }
}
