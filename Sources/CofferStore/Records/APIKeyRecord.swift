import CofferCore
import Foundation
import GRDB

/// A row of `api_keys` (migration 0001; `signature` from 0006).
struct APIKeyRecord: CodableRecord, PersistableRecord, Sendable {
    static let databaseTableName = "api_keys"

    /// The columns: the properties' coding keys.
    typealias Columns = CodingKeys
    enum CodingKeys: String, CodingKey, ColumnExpression {
        case keyId = "key_id", name, role, secretHash = "secret_hash", createdAt = "created_at", revokedAt = "revoked_at", signature
    }

    var keyId: String
    var name: String
    /// The raw ``Role``.
    var role: String
    var secretHash: String
    var createdAt: Date
    var revokedAt: Date?
    var signature: String?

    /// The row for `key`.
    init(_ key: APIKey) {
        keyId = key.keyId
        name = key.name
        role = key.role.rawValue
        secretHash = key.secretHash
        createdAt = key.createdAt
        revokedAt = key.revokedAt
        signature = key.signature
    }

    /// The stored key.
    func key() throws -> APIKey {
        guard let role = Role(rawValue: role) else { throw StoreError.invalidValue(column: Columns.role.name, value: role) }
        return APIKey(
            keyId: keyId, name: name, role: role, secretHash: secretHash, createdAt: createdAt, revokedAt: revokedAt, signature: signature)
    }
}
