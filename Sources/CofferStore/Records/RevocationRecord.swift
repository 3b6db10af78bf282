import CofferCore
import Foundation
import GRDB

/// A row of `revocations` (migrations 0002 and 0003).
struct RevocationRecord: ChainedRecord, Sendable {
    static let databaseTableName = "revocations"

    /// The columns: the properties' coding keys.
    typealias Columns = CodingKeys
    enum CodingKeys: String, CodingKey, ColumnExpression {
        case sequence, redemptionId = "redemption_id", transactionId = "transaction_id", revokedAt = "revoked_at", reason, source, reference
        case recordedAt = "recorded_at", environment, replayKey = "replay_key"
    }

    /// Nil until inserted: SQLite assigns it (AUTOINCREMENT).
    var sequence: Int64?
    var redemptionId: String
    var transactionId: String
    var revokedAt: Date
    var reason: String
    /// The raw ``Revocation/Source``: an unknown value is a ``StoreError/invalidValue(column:value:)``
    /// when read, like every other column.
    var source: String
    var reference: String
    var recordedAt: Date
    /// Nil on rows written before migration 0003.
    var environment: String?
    var replayKey: String?

    /// The row for `revocation`, its sequence left to SQLite.
    init(_ revocation: Revocation) {
        redemptionId = revocation.redemptionId
        transactionId = revocation.transactionId
        revokedAt = revocation.revokedAt
        reason = revocation.reason
        source = revocation.source.rawValue
        reference = revocation.reference
        recordedAt = revocation.recordedAt
        environment = revocation.environment
        replayKey = revocation.replayKey
    }

    /// The stored revocation.
    func revocation() throws -> Revocation {
        guard let source = Revocation.Source(rawValue: source) else { throw StoreError.invalidValue(column: Columns.source.name, value: source) }
        return Revocation(
            sequence: sequence ?? 0, redemptionId: redemptionId, transactionId: transactionId, revokedAt: revokedAt, reason: reason, source: source,
            reference: reference, recordedAt: recordedAt, environment: environment, replayKey: replayKey)
    }

    mutating func didInsert(_ inserted: InsertionSuccess) { sequence = inserted.rowID }
}
