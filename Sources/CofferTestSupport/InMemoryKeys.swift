import CofferCore
import Foundation

/// In-memory key store. As in SQLite, a key id or secret hash is never reused: creating a
/// second key with either throws, and a revoked key stays (with its first revocation time).
///
/// A logged change is made, then its entry recorded in `adminLog`; the change is undone if
/// that fails, as a failed transaction stores nothing (see ``InMemoryCatalogue``).
public actor InMemoryKeys: KeyRepository {
    private var keys: [APIKey] = []
    private let adminLog: InMemoryLedger?

    /// `adminLog`: where logged changes record their entries (a change given an entry
    /// without one throws ``InMemoryStorageError/adminLogUnavailable`` and is undone).
    public init(adminLog: InMemoryLedger? = nil) { self.adminLog = adminLog }

    public func create(_ key: APIKey, logging: AdminAction?) async throws {
        if keys.contains(where: { $0.keyId.sameBytes(key.keyId) || $0.secretHash.sameBytes(key.secretHash) }) {
            throw InMemoryStorageError.duplicate("key \(key.keyId)")
        }
        keys.append(key)
        try await logged(logging) { keys in keys.removeAll { $0.keyId.sameBytes(key.keyId) } }
    }

    public func key(secretHash: String) -> APIKey? { keys.first { $0.secretHash.sameBytes(secretHash) } }

    public func live() -> [APIKey] { keys.filter { $0.revokedAt == nil } }

    public func sign(keyId: String, signature: String, logging: AdminAction?) async throws -> Bool {
        guard let index = keys.firstIndex(where: { $0.keyId.sameBytes(keyId) && $0.signature == nil }) else { return false }
        keys[index].signature = signature
        try await logged(logging) { keys in Self.update(&keys, keyId) { $0.signature = nil } }
        return true
    }

    public func revoke(keyId: String, at: Date, logging: AdminAction?) async throws -> Bool {
        guard let index = keys.firstIndex(where: { $0.keyId.sameBytes(keyId) && $0.revokedAt == nil }) else { return false }
        keys[index].revokedAt = at
        try await logged(logging) { keys in Self.update(&keys, keyId) { $0.revokedAt = nil } }
        return true
    }

    /// Records `action` (if any); if that fails, runs `undo` on the keys and rethrows.
    private func logged(_ action: AdminAction?, undo: (inout [APIKey]) -> Void) async throws {
        guard let action else { return }
        do {
            guard let adminLog else { throw InMemoryStorageError.adminLogUnavailable }
            try await adminLog.record(action)
        } catch {
            undo(&keys)
            throw error
        }
    }

    private static func update(_ keys: inout [APIKey], _ keyId: String, _ change: (inout APIKey) -> Void) {
        guard let index = keys.firstIndex(where: { $0.keyId.sameBytes(keyId) }) else { return }
        change(&keys[index])
    }
}
