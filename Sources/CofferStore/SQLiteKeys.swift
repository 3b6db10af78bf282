import CofferCore
import Foundation
import GRDB

/// Admin and auditor keys in SQLite (only the secret's hash is stored).
public struct SQLiteKeys: KeyRepository {
    private let db: CofferDatabase

    /// A key store in `db`.
    public init(_ db: CofferDatabase) { self.db = db }

    /// Inserts a key. A duplicate key id or secret hash throws (SQLite UNIQUE / PRIMARY KEY):
    /// unlike the in-memory store, an existing key (possibly revoked) is never overwritten.
    public func create(_ key: APIKey) async throws {
        try await db.pool.write { db in try APIKeyRecord(key).insert(db) }
    }

    /// The key with this secret hash, revoked or not (the caller checks `revokedAt`).
    public func key(secretHash: String) async throws -> APIKey? {
        try await db.pool.read { db in try APIKeyRecord.filter(APIKeyRecord.Columns.secretHash == secretHash).fetchOne(db)?.key() }
    }

    /// Sets `revokedAt` on a live key; returns whether a row changed.
    public func revoke(keyId: String, at: Date) async throws -> Bool {
        try await db.pool.write { db in
            try APIKeyRecord.filter(APIKeyRecord.Columns.keyId == keyId && APIKeyRecord.Columns.revokedAt == nil)
                .updateAll(db, APIKeyRecord.Columns.revokedAt.set(to: at.timeIntervalSince1970)) > 0
        }
    }

    public func live() async throws -> [APIKey] {
        try await db.pool.read { db in
            try APIKeyRecord.filter(APIKeyRecord.Columns.revokedAt == nil)
                .order(APIKeyRecord.Columns.createdAt, APIKeyRecord.Columns.keyId).fetchAll(db).map { try $0.key() }
        }
    }

    public func sign(keyId: String, signature: String) async throws -> Bool {
        try await db.pool.write { db in
            try APIKeyRecord.filter(APIKeyRecord.Columns.keyId == keyId && APIKeyRecord.Columns.signature == nil)
                .updateAll(db, APIKeyRecord.Columns.signature.set(to: signature)) > 0
        }
    }

    /// Every key, revoked or not, oldest first (for `coffer ledger copy`).
    public func all() async throws -> [APIKey] {
        try await db.pool.read { db in
            try APIKeyRecord.order(APIKeyRecord.Columns.createdAt, APIKeyRecord.Columns.keyId).fetchAll(db).map { try $0.key() }
        }
    }
}
