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

/// A batch's rows, their chain events, the checkpoints due and the seal, in one statement:
/// columns as array parameters, `unnest`ed (PostgreSQL arrays hold no NULL from this driver, so
/// each nullable column comes with a flag array). Redemptions and attempts carry the numbers
/// given under the chain's lock (``PostgresChain/Locked``).
enum PostgresRows {
    static func write(
        _ c: PostgresConnection, redemptions rows: [Redemption], attempts: [RejectedAttempt], linked: PostgresChain.Linked, logger: Logger
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
        // Data-modifying WITH clauses run once each, whether or not the outer statement reads them.
        try await c.query(
            """
            WITH redemption_rows AS (
              INSERT INTO redemptions (sequence, redemption_id, transaction_id, original_transaction_id, product_id, bundle_id, environment,
                purchase_date, quantity, receipt_sha256, source_format, redeemed_at, client_address, app_account_token, status, grant_hash, replay_key,
                player_id, expires_at)
              SELECT r.seq, r.id, r.tx, CASE WHEN r.otx_null THEN NULL ELSE r.otx END, r.product, r.bundle, r.env,
                CASE WHEN r.pd_null THEN NULL ELSE r.pd END, r.qty, r.sha, r.fmt, r.at, r.client, CASE WHEN r.token_null THEN NULL ELSE r.token END,
                r.status, r.grant_hash, CASE WHEN r.rk_null THEN NULL ELSE r.rk END, CASE WHEN r.player_null THEN NULL ELSE r.player END,
                CASE WHEN r.exp_null THEN NULL ELSE r.exp END
              FROM unnest(\(rows.map(\.sequence))::bigint[], \(rows.map(\.redemptionId))::text[], \(rows.map(\.transactionId))::text[],
                \(original.values)::text[], \(original.isNull)::bool[], \(rows.map(\.productId))::text[], \(rows.map(\.bundleId))::text[],
                \(rows.map(\.environment))::text[], \(purchase.values)::float8[], \(purchase.isNull)::bool[],
                \(rows.map { Int32(clamping: $0.quantity) })::int4[], \(rows.map(\.receiptSHA256))::text[], \(rows.map(\.sourceFormat.rawValue))::text[],
                \(rows.map { $0.redeemedAt.timeIntervalSince1970 })::float8[], \(rows.map(\.clientAddress))::text[], \(token.values)::text[],
                \(token.isNull)::bool[], \(rows.map(\.status))::text[], \(rows.map(\.grantHash))::text[], \(replay.values)::text[], \(replay.isNull)::bool[],
                \(player.values)::text[], \(player.isNull)::bool[], \(expires.values)::float8[], \(expires.isNull)::bool[])
                AS r(seq, id, tx, otx, otx_null, product, bundle, env, pd, pd_null, qty, sha, fmt, at, client, token, token_null, status, grant_hash, rk,
                  rk_null, player, player_null, exp, exp_null)
            ), attempt_rows AS (
              INSERT INTO attempts (sequence, at, code, detail, transaction_id, product_id, receipt_sha256, client_address, claimed)
              SELECT a.seq, a.at, a.code, a.detail, CASE WHEN a.tx_null THEN NULL ELSE a.tx END, CASE WHEN a.product_null THEN NULL ELSE a.product END,
                a.sha, a.client, CASE WHEN a.claimed_null THEN NULL ELSE a.claimed END
              FROM unnest(\(attempts.map(\.sequence))::bigint[], \(attempts.map { $0.at.timeIntervalSince1970 })::float8[], \(attempts.map(\.code))::text[],
                \(attempts.map(\.detail))::text[], \(transaction.values)::text[], \(transaction.isNull)::bool[], \(product.values)::text[],
                \(product.isNull)::bool[], \(attempts.map(\.receiptSHA256))::text[], \(attempts.map(\.clientAddress))::text[], \(claimed.values)::bool[],
                \(claimed.isNull)::bool[])
                AS a(seq, at, code, detail, tx, tx_null, product, product_null, sha, client, claimed, claimed_null)
            ), events AS (
              INSERT INTO ledger_events (sequence, kind, row_sequence, entry_hash)
              SELECT * FROM unnest(\(linked.sequences)::bigint[], \(linked.kinds)::text[], \(linked.rows)::bigint[], \(linked.hashes)::text[])
            ), checkpoints AS (
              INSERT INTO ledger_checkpoints (sequence, entry_hash, time, key_id, signature)
              SELECT * FROM unnest(\(checkpoints.map(\.sequence))::bigint[], \(checkpoints.map(\.entryHash))::text[], \(checkpoints.map(\.time))::bigint[],
                \(checkpoints.map(\.keyId))::text[], \(checkpoints.map(\.signature))::text[])
            )
            INSERT INTO ledger_head (id, sequence, entry_hash, time, key_id, signature)
            SELECT 1, * FROM unnest(\(seal.map(\.sequence))::bigint[], \(seal.map(\.entryHash))::text[], \(seal.map(\.time))::bigint[],
              \(seal.map(\.keyId))::text[], \(seal.map(\.signature))::text[])
            ON CONFLICT (id) DO UPDATE SET sequence = excluded.sequence, entry_hash = excluded.entry_hash, time = excluded.time,
              key_id = excluded.key_id, signature = excluded.signature
            """, logger: logger)
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
