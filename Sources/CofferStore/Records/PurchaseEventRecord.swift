import CofferCore
import Foundation
import GRDB

/// A row of `purchase_events` (migration 0004).
struct PurchaseEventRecord: ChainedRecord, Sendable {
    static let databaseTableName = "purchase_events"

    /// The columns: the properties' coding keys.
    typealias Columns = CodingKeys
    enum CodingKeys: String, CodingKey, ColumnExpression {
        case sequence, at, kind, environment, replayKey = "replay_key", redemptionId = "redemption_id", transactionId = "transaction_id"
        case detail, source, reference, playerId = "player_id", expiresAt = "expires_at", graceUntil = "grace_until"
    }

    /// Nil until inserted: SQLite assigns it (AUTOINCREMENT).
    var sequence: Int64?
    var at: Date
    var kind: String
    var environment: String
    var replayKey: String
    var redemptionId: String
    var transactionId: String
    var detail: String
    /// The raw ``PurchaseEvent/Source``.
    var source: String
    var reference: String
    var playerId: String?
    var expiresAt: Date?
    var graceUntil: Date?

    init(_ e: PurchaseEvent) {
        at = e.at
        kind = e.kind
        environment = e.environment
        replayKey = e.replayKey
        redemptionId = e.redemptionId
        transactionId = e.transactionId
        detail = e.detail
        source = e.source.rawValue
        reference = e.reference
        playerId = e.playerId
        expiresAt = e.expiresAt
        graceUntil = e.graceUntil
    }

    func event() throws -> PurchaseEvent {
        guard let source = PurchaseEvent.Source(rawValue: source) else { throw StoreError.invalidValue(column: Columns.source.name, value: source) }
        return PurchaseEvent(
            sequence: sequence ?? 0, at: at, kind: kind, environment: environment, replayKey: replayKey, redemptionId: redemptionId,
            transactionId: transactionId, playerId: playerId, expiresAt: expiresAt, graceUntil: graceUntil, detail: detail, source: source,
            reference: reference)
    }

    mutating func didInsert(_ inserted: InsertionSuccess) { sequence = inserted.rowID }
}

/// A row of `deliveries` (migration 0004).
struct DeliveryRecord: CodableRecord, Sendable {
    static let databaseTableName = "deliveries"

    typealias Columns = CodingKeys
    enum CodingKeys: String, CodingKey, ColumnExpression {
        case sequence, redemptionId = "redemption_id", assetId = "asset_id", sha256, firstAt = "first_at", lastAt = "last_at", downloads
        case completed, bytesServed = "bytes_served", complete
    }

    var sequence: Int64?
    var redemptionId: String
    var assetId: String
    var sha256: String
    var firstAt: Date
    var lastAt: Date
    var downloads: Int64
    var completed: Int64
    var bytesServed: Int64
    var complete: Bool

    var delivery: Delivery {
        Delivery(
            sequence: sequence ?? 0, redemptionId: redemptionId, assetId: assetId, sha256: sha256, firstAt: firstAt, lastAt: lastAt,
            downloads: downloads, completed: completed, bytesServed: bytesServed, complete: complete)
    }

    mutating func didInsert(_ inserted: InsertionSuccess) { sequence = inserted.rowID }
}
