import CofferCore
import Foundation
import GRDB

/// Admin and auditor keys in SQLite (only the secret's hash is stored). A change's admin-log
/// entry is written in its transaction, chained and sealed under `checkpoints`.
public struct SQLiteKeys: KeyRepository {
    private let db: CofferDatabase
    private let checkpoints: CheckpointPolicy?

    /// A key store in `db`; `checkpoints` seals the chain when a change is logged.
    public init(_ db: CofferDatabase, checkpoints: CheckpointPolicy? = nil) {
        self.db = db
        self.checkpoints = checkpoints
    }

    /// Inserts a key. A duplicate key id or secret hash throws (SQLite UNIQUE / PRIMARY KEY):
    /// unlike the in-memory store, an existing key (possibly revoked) is never overwritten.
    public func create(_ key: APIKey, logging: AdminAction?) async throws {
        try await db.pool.write { [checkpoints] db in
            try APIKeyRecord(key).insert(db)
            try ChainStore.log(db, logging, policy: checkpoints)
        }
    }

    /// The key with this secret hash, revoked or not (the caller checks `revokedAt`).
    public func key(secretHash: String) async throws -> APIKey? {
        try await db.pool.read { db in try APIKeyRecord.filter(APIKeyRecord.Columns.secretHash == secretHash).fetchOne(db)?.key() }
    }

    /// Sets `revokedAt` on a live key; returns whether a row changed.
    public func revoke(keyId: String, at: Date, logging: AdminAction?) async throws -> Bool {
        try await db.pool.write { [checkpoints] db in
            guard
                try APIKeyRecord.filter(APIKeyRecord.Columns.keyId == keyId && APIKeyRecord.Columns.revokedAt == nil)
                    .updateAll(db, APIKeyRecord.Columns.revokedAt.set(to: at.timeIntervalSince1970)) > 0
            else { return false }
            try ChainStore.log(db, logging, policy: checkpoints)
            return true
        }
    }

    public func live() async throws -> [APIKey] {
        try await db.pool.read { db in
            try APIKeyRecord.filter(APIKeyRecord.Columns.revokedAt == nil)
                .order(APIKeyRecord.Columns.createdAt, APIKeyRecord.Columns.keyId).fetchAll(db).map { try $0.key() }
        }
    }

    public func sign(keyId: String, signature: String, logging: AdminAction?) async throws -> Bool {
        try await db.pool.write { [checkpoints] db in
            guard
                try APIKeyRecord.filter(APIKeyRecord.Columns.keyId == keyId && APIKeyRecord.Columns.signature == nil)
                    .updateAll(db, APIKeyRecord.Columns.signature.set(to: signature)) > 0
            else { return false }
            try ChainStore.log(db, logging, policy: checkpoints)
            return true
        }
    }

    /// Every key, revoked or not, oldest first (for `coffer ledger copy`).
    public func all() async throws -> [APIKey] {
        try await db.pool.read { db in
            try APIKeyRecord.order(APIKeyRecord.Columns.createdAt, APIKeyRecord.Columns.keyId).fetchAll(db).map { try $0.key() }
        }
    }
}
