import CofferCore
import Foundation
import GRDB

/// A row of `admin_actions` (migration 0002).
struct AdminActionRecord: ChainedRecord, Sendable {
    static let databaseTableName = "admin_actions"

    /// The columns: the properties' coding keys.
    enum CodingKeys: String, CodingKey, ColumnExpression {
        case sequence, at, keyId = "key_id", keyName = "key_name", action, target, detail, clientAddress = "client_address"
    }

    /// Nil until inserted: SQLite assigns it (AUTOINCREMENT).
    var sequence: Int64?
    var at: Date
    var keyId: String
    var keyName: String
    var action: String
    var target: String
    var detail: String
    var clientAddress: String

    /// The row for `action`, its sequence left to SQLite.
    init(_ action: AdminAction) {
        at = action.at
        keyId = action.keyId
        keyName = action.keyName
        self.action = action.action
        target = action.target
        detail = action.detail
        clientAddress = action.clientAddress
    }

    /// The stored admin action.
    var adminAction: AdminAction {
        AdminAction(
            sequence: sequence ?? 0, at: at, keyId: keyId, keyName: keyName, action: action, target: target, detail: detail,
            clientAddress: clientAddress)
    }

    mutating func didInsert(_ inserted: InsertionSuccess) { sequence = inserted.rowID }
}
