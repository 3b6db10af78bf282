import CofferCore
import Foundation
import Logging
import PostgresNIO

// Reading rows by column name, and the model types' row mappings. Dates are double precision
// unix seconds (as in the SQLite backend, so a copied ledger keeps every value exactly).

extension PostgresRandomAccessRow {
    func value<T: PostgresDecodable>(_ column: String, _ type: T.Type = T.self) throws -> T { try self[column].decode(T.self) }
    func date(_ column: String) throws -> Date { try Self.date(column, try value(column, Double.self)) }
    func optionalDate(_ column: String) throws -> Date? { try value(column, Double?.self).map { try Self.date(column, $0) } }
    /// A stored time, refused when out of range (NaN, infinite, ±10¹² s: written behind the
    /// server's back) as an invalid value, never a trap further on.
    private static func date(_ column: String, _ seconds: Double) throws -> Date {
        guard let date = LedgerEntry.storedDate(seconds: seconds) else { throw PostgresStoreError.invalidValue(column: column, value: "\(seconds)") }
        return date
    }
}

extension PostgresConnection {
    /// Every row of `query`, mapped by `transform` (rows read by column name). Watched until the
    /// last row (``StatementWatch/firstAnswer()``): rows that stop coming from a server lost
    /// mid-stream fail as a lost session, never hang.
    func rows<T>(_ query: PostgresQuery, logger: Logger, _ transform: (PostgresRandomAccessRow) throws -> T) async throws -> [T] {
        try await readAll(query, logger: logger) { rows in
            var result: [T] = []
            for try await row in rows { result.append(try transform(row.makeRandomAccess())) }
            return result
        }
    }

    /// The first column of every row of `query`, watched as ``rows(_:logger:_:)`` is.
    func column<T: PostgresDecodable & Sendable>(_ query: PostgresQuery, _ type: T.Type, logger: Logger) async throws -> [T] {
        try await readAll(query, logger: logger) { rows in
            var result: [T] = []
            for try await value in rows.decode(T.self) { result.append(value) }
            return result
        }
    }

    /// `read` over `query`'s rows, its statement watched until `read` returns.
    private func readAll<R>(_ query: PostgresQuery, logger: Logger, _ read: (PostgresRowSequence) async throws -> R) async throws -> R {
        let (rows, watch) = try await checkedQuery(query, logger: logger, streaming: true)
        defer { watch?.answered() }
        do {
            return try await read(rows)
        } catch  where watch?.closed == true {
            throw PostgresStoreError.sessionLost
        }
    }
}

extension Redemption {
    static let columns =
        "sequence, redemption_id, transaction_id, original_transaction_id, product_id, bundle_id, environment, purchase_date, quantity, receipt_sha256, source_format, redeemed_at, client_address, app_account_token, status, grant_hash, replay_key, player_id, expires_at"

    init(row: PostgresRandomAccessRow) throws {
        let format = try row.value("source_format", String.self)
        guard let sourceFormat = SourceFormat(rawValue: format) else { throw PostgresStoreError.invalidValue(column: "source_format", value: format) }
        self.init(
            sequence: try row.value("sequence"), redemptionId: try row.value("redemption_id"), transactionId: try row.value("transaction_id"),
            originalTransactionId: try row.value("original_transaction_id"), productId: try row.value("product_id"),
            bundleId: try row.value("bundle_id"), environment: try row.value("environment"), purchaseDate: try row.optionalDate("purchase_date"),
            quantity: Int(try row.value("quantity", Int32.self)), receiptSHA256: try row.value("receipt_sha256"), sourceFormat: sourceFormat,
            redeemedAt: try row.date("redeemed_at"), clientAddress: try row.value("client_address"),
            appAccountToken: try row.value("app_account_token"), status: try row.value("status"), grantHash: try row.value("grant_hash"),
            replayKey: try row.value("replay_key"), playerId: try row.value("player_id"), expiresAt: try row.optionalDate("expires_at"))
    }
}

extension PurchaseEvent {
    static let columns =
        "sequence, at, kind, environment, replay_key, redemption_id, transaction_id, detail, source, reference, player_id, expires_at, grace_until"

    init(row: PostgresRandomAccessRow) throws {
        let source = try row.value("source", String.self)
        guard let known = Source(rawValue: source) else { throw PostgresStoreError.invalidValue(column: "source", value: source) }
        self.init(
            sequence: try row.value("sequence"), at: try row.date("at"), kind: try row.value("kind", String.self),
            environment: try row.value("environment"), replayKey: try row.value("replay_key"), redemptionId: try row.value("redemption_id"),
            transactionId: try row.value("transaction_id"), playerId: try row.value("player_id"), expiresAt: try row.optionalDate("expires_at"),
            graceUntil: try row.optionalDate("grace_until"), detail: try row.value("detail"), source: known, reference: try row.value("reference"))
    }
}

extension Delivery {
    static let columns = "sequence, redemption_id, asset_id, sha256, first_at, last_at, downloads, completed, bytes_served, complete"

    init(row: PostgresRandomAccessRow) throws {
        self.init(
            sequence: try row.value("sequence"), redemptionId: try row.value("redemption_id"), assetId: try row.value("asset_id"),
            sha256: try row.value("sha256"), firstAt: try row.date("first_at"), lastAt: try row.date("last_at"),
            downloads: try row.value("downloads"),
            completed: try row.value("completed"), bytesServed: try row.value("bytes_served"), complete: try row.value("complete"))
    }
}

extension RejectedAttempt {
    static let columns = "sequence, at, code, detail, transaction_id, product_id, receipt_sha256, client_address, claimed"

    init(row: PostgresRandomAccessRow) throws {
        self.init(
            sequence: try row.value("sequence"), at: try row.date("at"), code: try row.value("code"), detail: try row.value("detail"),
            transactionId: try row.value("transaction_id"), productId: try row.value("product_id"), receiptSHA256: try row.value("receipt_sha256"),
            clientAddress: try row.value("client_address"), claimed: try row.value("claimed"))
    }
}

extension Revocation {
    static let columns = "sequence, redemption_id, transaction_id, revoked_at, reason, source, reference, recorded_at, environment, replay_key"

    init(row: PostgresRandomAccessRow) throws {
        let source = try row.value("source", String.self)
        guard let known = Source(rawValue: source) else { throw PostgresStoreError.invalidValue(column: "source", value: source) }
        self.init(
            sequence: try row.value("sequence"), redemptionId: try row.value("redemption_id"), transactionId: try row.value("transaction_id"),
            revokedAt: try row.date("revoked_at"), reason: try row.value("reason"), source: known, reference: try row.value("reference"),
            recordedAt: try row.date("recorded_at"), environment: try row.value("environment"), replayKey: try row.value("replay_key"))
    }
}

extension AdminAction {
    static let columns = "sequence, at, key_id, key_name, action, target, detail, client_address"

    init(row: PostgresRandomAccessRow) throws {
        self.init(
            sequence: try row.value("sequence"), at: try row.date("at"), keyId: try row.value("key_id"), keyName: try row.value("key_name"),
            action: try row.value("action"), target: try row.value("target"), detail: try row.value("detail"),
            clientAddress: try row.value("client_address"))
    }
}

extension LedgerCheckpoint {
    static let columns = "sequence, entry_hash, time, key_id, signature"

    init(row: PostgresRandomAccessRow) throws {
        self.init(
            sequence: try row.value("sequence"), entryHash: try row.value("entry_hash"), time: try row.value("time"), keyId: try row.value("key_id"),
            signature: try row.value("signature"))
    }
}

/// A batch's rows, their chain events, the checkpoints due and the seal, in one statement
/// (`coffer_append_rows`, migration 0004): columns as array parameters (PostgreSQL arrays hold
/// no NULL from this driver, so each nullable column comes with a flag array). Redemptions and
/// attempts carry the numbers given under the chain's lock (``PostgresChain/Locked``).
enum PostgresRows {
    /// In the caller's transaction (which holds the transaction-scoped lock), or — `release`
    /// given — as the ledger writer's append: `CALL coffer_append_commit`, which writes,
    /// commits, lets the session lock `release` go (``PostgresChain/take(_:purchases:logger:)``)
    /// and then waits for the flush (migration 0005): a caller answered after this returns is
    /// answered after the flush. Called outside a transaction block.
    static func write(
        _ c: PostgresConnection, redemptions rows: [Redemption], attempts: [RejectedAttempt], linked: PostgresChain.Linked, release: Int64? = nil,
        logger: Logger
    ) async throws {
        let original = Nullable(rows.map(\.originalTransactionId))
        let purchase = Nullable(rows.map { $0.purchaseDate?.timeIntervalSince1970 }, placeholder: 0)
        let token = Nullable(rows.map(\.appAccountToken))
        let replay = Nullable(rows.map(\.replayKey))
        let player = Nullable(rows.map(\.playerId))
        let expires = Nullable(rows.map { $0.expiresAt?.timeIntervalSince1970 }, placeholder: 0)
        let transaction = Nullable(attempts.map(\.transactionId))
        let product = Nullable(attempts.map(\.productId))
        let claimed = Nullable(attempts.map(\.claimed), placeholder: false)
        let checkpoints = linked.checkpoints
        let seal = linked.seal.map { [$0] } ?? []
        // In the order of coffer_append_rows' parameters; the function is chosen by their types.
        var binds = PostgresBindings(capacity: 52)
        if let release { binds.append(release) }
        // Redemptions.
        binds.append(rows.map(\.sequence))
        binds.append(rows.map(\.redemptionId))
        binds.append(rows.map(\.transactionId))
        binds.append(original.values)
        binds.append(original.isNull)
        binds.append(rows.map(\.productId))
        binds.append(rows.map(\.bundleId))
        binds.append(rows.map(\.environment))
        binds.append(purchase.values)
        binds.append(purchase.isNull)
        binds.append(rows.map { Int32(clamping: $0.quantity) })
        binds.append(rows.map(\.receiptSHA256))
        binds.append(rows.map(\.sourceFormat.rawValue))
        binds.append(rows.map { $0.redeemedAt.timeIntervalSince1970 })
        binds.append(rows.map(\.clientAddress))
        binds.append(token.values)
        binds.append(token.isNull)
        binds.append(rows.map(\.status))
        binds.append(rows.map(\.grantHash))
        binds.append(replay.values)
        binds.append(replay.isNull)
        binds.append(player.values)
        binds.append(player.isNull)
        binds.append(expires.values)
        binds.append(expires.isNull)
        // Attempts.
        binds.append(attempts.map(\.sequence))
        binds.append(attempts.map { $0.at.timeIntervalSince1970 })
        binds.append(attempts.map(\.code))
        binds.append(attempts.map(\.detail))
        binds.append(transaction.values)
        binds.append(transaction.isNull)
        binds.append(product.values)
        binds.append(product.isNull)
        binds.append(attempts.map(\.receiptSHA256))
        binds.append(attempts.map(\.clientAddress))
        binds.append(claimed.values)
        binds.append(claimed.isNull)
        // Events, checkpoints, seal.
        binds.append(linked.sequences)
        binds.append(linked.kinds)
        binds.append(linked.rows)
        binds.append(linked.hashes)
        for rows in [checkpoints, seal] {
            binds.append(rows.map(\.sequence))
            binds.append(rows.map(\.entryHash))
            binds.append(rows.map(\.time))
            binds.append(rows.map(\.keyId))
            binds.append(rows.map(\.signature))
        }
        // Only placeholders are spliced into the text: every value is a bind.
        let placeholders = (1...binds.count).map { "$\($0)" }.joined(separator: ", ")
        let sql = release == nil ? "SELECT coffer_append_rows(\(placeholders))" : "CALL coffer_append_commit(\(placeholders))"
        for try await _ in try await c.checkedQuery(PostgresQuery(unsafeSQL: sql, binds: binds), logger: logger) {}
    }

    /// A nullable column as two arrays: the values (a placeholder where nil) and the nil flags.
    struct Nullable<T> {
        var values: [T]
        var isNull: [Bool]

        init(_ column: [T?], placeholder: T) {
            values = column.map { $0 ?? placeholder }
            isNull = column.map { $0 == nil }
        }
    }
}

extension PostgresRows.Nullable where T == String {
    init(_ column: [String?]) { self.init(column, placeholder: "") }
}
