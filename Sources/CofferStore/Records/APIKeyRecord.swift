import CofferCore
import Foundation
import GRDB

/// A row of `api_keys`.
struct APIKeyRecord: FetchableRecord, PersistableRecord, Sendable {
    static let databaseTableName = "api_keys"

    /// The columns of `api_keys`.
    enum Columns {
        static let keyId = Column("key_id")
        static let name = Column("name")
        static let role = Column("role")
        static let secretHash = Column("secret_hash")
        static let createdAt = Column("created_at")
        static let revokedAt = Column("revoked_at")
    }

    var key: APIKey

    init(_ key: APIKey) { self.key = key }

    init(row: Row) throws {
        key = APIKey(
            keyId: try row.decode(forColumn: Columns.keyId), name: try row.decode(forColumn: Columns.name),
            role: try row.enumValue(Role.self, Columns.role), secretHash: try row.decode(forColumn: Columns.secretHash),
            createdAt: try row.date(Columns.createdAt), revokedAt: try row.optionalDate(Columns.revokedAt))
    }

    func encode(to container: inout PersistenceContainer) throws {
        container[Columns.keyId] = key.keyId
        container[Columns.name] = key.name
        container[Columns.role] = key.role.rawValue
        container[Columns.secretHash] = key.secretHash
        container[Columns.createdAt] = key.createdAt.unixSeconds
        container[Columns.revokedAt] = key.revokedAt?.unixSeconds
    }
}
