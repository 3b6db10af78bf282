import CofferCore
import Foundation
import PostgresNIO

/// Admin and auditor keys in PostgreSQL (only the secret's hash is stored). A change's
/// admin-log entry is written in its transaction, chained and sealed under `checkpoints`.
public struct PostgresKeys: KeyRepository {
    private let backend: PostgresBackend
    private let checkpoints: CheckpointPolicy?

    /// `checkpoints` seals the chain when a change is logged.
    public init(_ backend: PostgresBackend, checkpoints: CheckpointPolicy? = nil) {
        self.backend = backend
        self.checkpoints = checkpoints
    }

    /// Inserts a key; a duplicate key id or secret hash throws (never overwrites a key).
    public func create(_ key: APIKey, logging: AdminAction?) async throws {
        try await backend.transaction { [checkpoints] c in
            try await c.checkedQuery(
                """
                INSERT INTO api_keys (key_id, name, role, secret_hash, created_at, revoked_at, signature)
                VALUES (\(key.keyId), \(key.name), \(key.role.rawValue), \(key.secretHash), \(key.createdAt.timeIntervalSince1970),
                  \(key.revokedAt?.timeIntervalSince1970), \(key.signature))
                """, logger: backend.logger)
            try await PostgresChain.log(c, logging, policy: checkpoints, logger: backend.logger)
        }
    }

    /// The key with this secret hash, revoked or not (the caller checks `revokedAt`).
    public func key(secretHash: String) async throws -> APIKey? {
        try await backend.read { c in
            try await c.rows("SELECT * FROM api_keys WHERE secret_hash = \(secretHash)", logger: backend.logger, Self.key).first
        }
    }

    /// Sets `revokedAt` on a live key; returns whether one changed.
    public func revoke(keyId: String, at: Date, logging: AdminAction?) async throws -> Bool {
        try await backend.transaction { [checkpoints] c in
            guard
                !(try await c.column(
                    "UPDATE api_keys SET revoked_at = \(at.timeIntervalSince1970) WHERE key_id = \(keyId) AND revoked_at IS NULL RETURNING key_id",
                    String.self, logger: backend.logger)).isEmpty
            else { return false }
            try await PostgresChain.log(c, logging, policy: checkpoints, logger: backend.logger)
            return true
        }
    }

    public func live() async throws -> [APIKey] {
        try await backend.read { c in
            try await c.rows("SELECT * FROM api_keys WHERE revoked_at IS NULL ORDER BY created_at, key_id", logger: backend.logger, Self.key)
        }
    }

    public func sign(keyId: String, signature: String, logging: AdminAction?) async throws -> Bool {
        try await backend.transaction { [checkpoints] c in
            guard
                !(try await c.column(
                    "UPDATE api_keys SET signature = \(signature) WHERE key_id = \(keyId) AND signature IS NULL RETURNING key_id", String.self,
                    logger: backend.logger)).isEmpty
            else { return false }
            try await PostgresChain.log(c, logging, policy: checkpoints, logger: backend.logger)
            return true
        }
    }

    static func key(_ row: PostgresRandomAccessRow) throws -> APIKey {
        let role = try row.value("role", String.self)
        guard let known = Role(rawValue: role) else { throw PostgresStoreError.invalidValue(column: "api_keys.role", value: role) }
        return APIKey(
            keyId: try row.value("key_id"), name: try row.value("name"), role: known, secretHash: try row.value("secret_hash"),
            createdAt: try row.date("created_at"), revokedAt: try row.optionalDate("revoked_at"), signature: try row.value("signature"))
    }
}
