import CofferCore
import Foundation
import Logging
import PostgresNIO

// Reading rows by column name, and the model types' row mappings. Dates are double precision
// unix seconds (as in the SQLite backend, so a copied ledger keeps every value exactly).

extension PostgresRandomAccessRow {
    func value<T: PostgresDecodable>(_ column: String, _ type: T.Type = T.self) throws -> T { try self[column].decode(T.self) }
    func date(_ column: String) throws -> Date { Date(timeIntervalSince1970: try value(column, Double.self)) }
    func optionalDate(_ column: String) throws -> Date? { try value(column, Double?.self).map(Date.init(timeIntervalSince1970:)) }
}

extension PostgresConnection {
    /// Every row of `query`, mapped by `transform` (rows read by column name).
    func rows<T>(_ query: PostgresQuery, logger: Logger, _ transform: (PostgresRandomAccessRow) throws -> T) async throws -> [T] {
        var result: [T] = []
        for try await row in try await self.query(query, logger: logger) { result.append(try transform(row.makeRandomAccess())) }
        return result
    }

    /// The first column of every row of `query`.
    func column<T: PostgresDecodable & Sendable>(_ query: PostgresQuery, _ type: T.Type, logger: Logger) async throws -> [T] {
        var result: [T] = []
        for try await value in try await self.query(query, logger: logger).decode(T.self) { result.append(value) }
        return result
    }
}

extension Redemption {
    static let columns =
        "sequence, redemption_id, transaction_id, original_transaction_id, product_id, bundle_id, environment, purchase_date, quantity, receipt_sha256, source_format, redeemed_at, client_address, app_account_token, status, grant_hash, replay_key"

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
            replayKey: try row.value("replay_key"))
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

/// Many rows inserted with one statement each table: columns as array parameters, `unnest`ed
/// in order (PostgreSQL arrays hold no NULL from this driver, so each nullable column comes
/// with a flag array). Returns the sequences assigned, in input order: the identity default
/// is drawn row by row in the SELECT's `ORDER BY ordinality`, so they ascend in that order.
enum PostgresRows {
    static func insert(_ rows: [Redemption], _ c: PostgresConnection, logger: Logger) async throws -> [Int64] {
        guard !rows.isEmpty else { return [] }
        let original = Nullable(rows.map(\.originalTransactionId))
        let purchase = Nullable(rows.map { $0.purchaseDate?.timeIntervalSince1970 }, placeholder: 0)
        let token = Nullable(rows.map(\.appAccountToken))
        let replay = Nullable(rows.map(\.replayKey))
        let sequences = try await c.column(
            """
            INSERT INTO redemptions (redemption_id, transaction_id, original_transaction_id, product_id, bundle_id, environment, purchase_date,
              quantity, receipt_sha256, source_format, redeemed_at, client_address, app_account_token, status, grant_hash, replay_key)
            SELECT r.id, r.tx, CASE WHEN r.otx_null THEN NULL ELSE r.otx END, r.product, r.bundle, r.env, CASE WHEN r.pd_null THEN NULL ELSE r.pd END,
              r.qty, r.sha, r.fmt, r.at, r.client, CASE WHEN r.token_null THEN NULL ELSE r.token END, r.status, r.grant_hash,
              CASE WHEN r.rk_null THEN NULL ELSE r.rk END
            FROM unnest(\(rows.map(\.redemptionId))::text[], \(rows.map(\.transactionId))::text[], \(original.values)::text[], \(original.isNull)::bool[],
              \(rows.map(\.productId))::text[], \(rows.map(\.bundleId))::text[], \(rows.map(\.environment))::text[], \(purchase.values)::float8[],
              \(purchase.isNull)::bool[], \(rows.map { Int32(clamping: $0.quantity) })::int4[], \(rows.map(\.receiptSHA256))::text[],
              \(rows.map(\.sourceFormat.rawValue))::text[], \(rows.map { $0.redeemedAt.timeIntervalSince1970 })::float8[],
              \(rows.map(\.clientAddress))::text[], \(token.values)::text[], \(token.isNull)::bool[], \(rows.map(\.status))::text[],
              \(rows.map(\.grantHash))::text[], \(replay.values)::text[], \(replay.isNull)::bool[])
              WITH ORDINALITY AS r(id, tx, otx, otx_null, product, bundle, env, pd, pd_null, qty, sha, fmt, at, client, token, token_null, status,
                grant_hash, rk, rk_null, ord)
            ORDER BY r.ord
            RETURNING sequence
            """, Int64.self, logger: logger)
        return try ordered(sequences, count: rows.count)
    }

    static func insert(_ rows: [RejectedAttempt], _ c: PostgresConnection, logger: Logger) async throws -> [Int64] {
        guard !rows.isEmpty else { return [] }
        let transaction = Nullable(rows.map(\.transactionId))
        let product = Nullable(rows.map(\.productId))
        let claimed = Nullable(rows.map(\.claimed), placeholder: false)
        let sequences = try await c.column(
            """
            INSERT INTO attempts (at, code, detail, transaction_id, product_id, receipt_sha256, client_address, claimed)
            SELECT a.at, a.code, a.detail, CASE WHEN a.tx_null THEN NULL ELSE a.tx END, CASE WHEN a.product_null THEN NULL ELSE a.product END,
              a.sha, a.client, CASE WHEN a.claimed_null THEN NULL ELSE a.claimed END
            FROM unnest(\(rows.map { $0.at.timeIntervalSince1970 })::float8[], \(rows.map(\.code))::text[], \(rows.map(\.detail))::text[],
              \(transaction.values)::text[], \(transaction.isNull)::bool[], \(product.values)::text[], \(product.isNull)::bool[],
              \(rows.map(\.receiptSHA256))::text[], \(rows.map(\.clientAddress))::text[], \(claimed.values)::bool[], \(claimed.isNull)::bool[])
              WITH ORDINALITY AS a(at, code, detail, tx, tx_null, product, product_null, sha, client, claimed, claimed_null, ord)
            ORDER BY a.ord
            RETURNING sequence
            """, Int64.self, logger: logger)
        return try ordered(sequences, count: rows.count)
    }

    private static func ordered(_ sequences: [Int64], count: Int) throws -> [Int64] {
        guard sequences.count == count else {
            throw PostgresStoreError.invalidValue(column: "sequence", value: "\(sequences.count) rows inserted of \(count)")
        }
        return sequences.sorted()
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
