import CofferCore
import Foundation
import GRDB

/// A row of `attempts`: a refused redemption.
///
/// Mapped by hand, like ``RedemptionRecord`` and for the same reason: every refused redemption
/// inserts one in the group-commit transaction, where GRDB's Codable coding costs more than this.
struct AttemptRecord: FetchableRecord, PersistableRecord, Sendable {
    static let databaseTableName = "attempts"

    /// The columns of `attempts`.
    enum Columns {
        static let sequence = Column("sequence")
        static let at = Column("at")
        static let code = Column("code")
        static let detail = Column("detail")
        static let transactionId = Column("transaction_id")
        static let productId = Column("product_id")
        static let receiptSHA256 = Column("receipt_sha256")
        static let clientAddress = Column("client_address")
        static let claimed = Column("claimed")
    }

    var attempt: RejectedAttempt

    init(_ attempt: RejectedAttempt) { self.attempt = attempt }

    init(row: Row) throws {
        attempt = RejectedAttempt(
            sequence: try row.decode(forColumn: Columns.sequence), at: try row.date(Columns.at), code: try row.decode(forColumn: Columns.code),
            detail: try row.decode(forColumn: Columns.detail), transactionId: try row.decode(forColumn: Columns.transactionId),
            productId: try row.decode(forColumn: Columns.productId), receiptSHA256: try row.decode(forColumn: Columns.receiptSHA256),
            clientAddress: try row.decode(forColumn: Columns.clientAddress), claimed: try row.decode(forColumn: Columns.claimed))
    }

    /// Encodes every column but `sequence`, which SQLite assigns (AUTOINCREMENT).
    func encode(to container: inout PersistenceContainer) throws {
        container[Columns.claimed] = attempt.claimed
        container[Columns.at] = attempt.at.unixSeconds
        container[Columns.code] = attempt.code
        container[Columns.detail] = attempt.detail
        container[Columns.transactionId] = attempt.transactionId
        container[Columns.productId] = attempt.productId
        container[Columns.receiptSHA256] = attempt.receiptSHA256
        container[Columns.clientAddress] = attempt.clientAddress
    }
}

extension AttemptRecord {
    /// The audit query for `filter`, mirroring `InMemoryLedger.attempts(_:)`.
    static func audit(_ f: AuditFilter) -> QueryInterfaceRequest<AttemptRecord> {
        f.request(
            AttemptRecord.self, sequence: Columns.sequence, time: Columns.at,
            equal: [Columns.transactionId: f.transactionId, Columns.productId: f.productId, Columns.code: f.code])
    }
}
