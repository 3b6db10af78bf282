import CofferCore
import Foundation
import PostgresNIO

/// Writes a whole ledger into an empty database, rows keeping their sequence numbers and every
/// value as stored — so the chain, its checkpoints and its seal verify as they did (`coffer
/// ledger copy`, the upgrade from one SQLite box). Used inside ``PostgresBackend/importLedger(_:)``,
/// one transaction: a failed copy leaves the database empty.
public struct PostgresImporter {
    let c: PostgresConnection
    let logger: Logger

    public func products(_ products: [Product]) async throws {
        for p in products {
            try await c.checkedQuery(
                """
                INSERT INTO products (product_id, bundle_id, type, asset_ids, title, updated_at, family_shareable, duration_seconds)
                VALUES (\(p.productId), \(p.bundleId), \(p.type.rawValue), \(p.assetIds), \(p.title), \(p.updatedAt.timeIntervalSince1970),
                  \(p.familyShareable), \(p.durationSeconds))
                """, logger: logger)
        }
    }

    public func assets(_ assets: [Asset]) async throws {
        for a in assets {
            try await c.checkedQuery(
                """
                INSERT INTO assets (asset_id, version, name, content_type, size, sha256, created_at)
                VALUES (\(a.assetId), \(Int32(clamping: a.version)), \(a.name), \(a.contentType), \(a.size), \(a.sha256), \(a.createdAt.timeIntervalSince1970))
                """, logger: logger)
        }
    }

    public func pins(_ pins: [ContentPin]) async throws {
        for p in pins {
            try await c.checkedQuery(
                """
                INSERT INTO content_pins (location, sha256, tag, pinned_at)
                VALUES (\(p.location), \(p.sha256), \(p.tag), \(p.pinnedAt.timeIntervalSince1970))
                """, logger: logger)
        }
    }

    public func keys(_ keys: [APIKey]) async throws {
        for k in keys {
            try await c.checkedQuery(
                """
                INSERT INTO api_keys (key_id, name, role, secret_hash, created_at, revoked_at, signature)
                VALUES (\(k.keyId), \(k.name), \(k.role.rawValue), \(k.secretHash), \(k.createdAt.timeIntervalSince1970), \(k.revokedAt?.timeIntervalSince1970),
                  \(k.signature))
                """, logger: logger)
        }
    }

    public func redemptions(_ rows: [Redemption]) async throws {
        for r in rows {
            try PostgresChain.checkStorable(.redemption(r, sequence: 1))
            try await c.checkedQuery(
                """
                INSERT INTO redemptions (sequence, redemption_id, transaction_id, original_transaction_id, product_id, bundle_id, environment,
                  purchase_date, quantity, receipt_sha256, source_format, redeemed_at, client_address, app_account_token, status, grant_hash, replay_key,
                  player_id, expires_at)
                VALUES (\(r.sequence), \(r.redemptionId), \(r.transactionId), \(r.originalTransactionId), \(r.productId), \(r.bundleId), \(r.environment),
                  \(r.purchaseDate?.timeIntervalSince1970), \(Int32(clamping: r.quantity)), \(r.receiptSHA256), \(r.sourceFormat.rawValue),
                  \(r.redeemedAt.timeIntervalSince1970), \(r.clientAddress), \(r.appAccountToken), \(r.status), \(r.grantHash), \(r.replayKey),
                  \(r.playerId), \(r.expiresAt?.timeIntervalSince1970))
                """, logger: logger)
        }
    }

    public func attempts(_ rows: [RejectedAttempt]) async throws {
        for a in rows {
            try PostgresChain.checkStorable(.attempt(a, sequence: 1))
            try await c.checkedQuery(
                """
                INSERT INTO attempts (sequence, at, code, detail, transaction_id, product_id, receipt_sha256, client_address, claimed)
                VALUES (\(a.sequence), \(a.at.timeIntervalSince1970), \(a.code), \(a.detail), \(a.transactionId), \(a.productId), \(a.receiptSHA256),
                  \(a.clientAddress), \(a.claimed))
                """, logger: logger)
        }
    }

    public func revocations(_ rows: [Revocation]) async throws {
        for r in rows {
            try await c.checkedQuery(
                """
                INSERT INTO revocations (sequence, redemption_id, transaction_id, revoked_at, reason, source, reference, recorded_at, environment, replay_key)
                VALUES (\(r.sequence), \(r.redemptionId), \(r.transactionId), \(r.revokedAt.timeIntervalSince1970), \(r.reason), \(r.source.rawValue),
                  \(r.reference), \(r.recordedAt.timeIntervalSince1970), \(r.environment), \(r.replayKey))
                """, logger: logger)
        }
    }

    public func adminActions(_ rows: [AdminAction]) async throws {
        for a in rows {
            try await c.checkedQuery(
                """
                INSERT INTO admin_actions (sequence, at, key_id, key_name, action, target, detail, client_address)
                VALUES (\(a.sequence), \(a.at.timeIntervalSince1970), \(a.keyId), \(a.keyName), \(a.action), \(a.target), \(a.detail), \(a.clientAddress))
                """, logger: logger)
        }
    }

    public func purchaseEvents(_ rows: [PurchaseEvent]) async throws {
        for e in rows {
            try await c.checkedQuery(
                """
                INSERT INTO purchase_events (sequence, at, kind, environment, replay_key, redemption_id, transaction_id, detail, source, reference,
                  player_id, expires_at, grace_until)
                VALUES (\(e.sequence), \(e.at.timeIntervalSince1970), \(e.kind), \(e.environment), \(e.replayKey), \(e.redemptionId),
                  \(e.transactionId), \(e.detail), \(e.source.rawValue), \(e.reference), \(e.playerId), \(e.expiresAt?.timeIntervalSince1970),
                  \(e.graceUntil?.timeIntervalSince1970))
                """, logger: logger)
        }
    }

    public func deliveries(_ rows: [Delivery]) async throws {
        for d in rows {
            try await c.checkedQuery(
                """
                INSERT INTO deliveries (sequence, redemption_id, asset_id, sha256, first_at, last_at, downloads, completed, bytes_served, complete)
                VALUES (\(d.sequence), \(d.redemptionId), \(d.assetId), \(d.sha256), \(d.firstAt.timeIntervalSince1970),
                  \(d.lastAt.timeIntervalSince1970), \(d.downloads), \(d.completed), \(d.bytesServed), \(d.complete))
                """, logger: logger)
        }
    }

    /// Chain events exactly as stored (their hashes are not recomputed: the copy is verified after).
    public func events(_ events: [StoredEvent]) async throws {
        guard !events.isEmpty else { return }
        try await c.checkedQuery(
            """
            INSERT INTO ledger_events (sequence, kind, row_sequence, entry_hash)
            SELECT * FROM unnest(\(events.map(\.sequence))::bigint[], \(events.map(\.kind.rawValue))::text[], \(events.map(\.row))::bigint[],
              \(events.map(\.entryHash))::text[])
            """, logger: logger)
    }

    public func checkpoints(_ checkpoints: [LedgerCheckpoint]) async throws {
        for checkpoint in checkpoints { try await PostgresChain.insert(c, checkpoint, logger: logger) }
    }

    public func seal(_ s: LedgerCheckpoint) async throws {
        try await c.checkedQuery(
            """
            INSERT INTO ledger_head (id, sequence, entry_hash, time, key_id, signature)
            VALUES (1, \(s.sequence), \(s.entryHash), \(s.time), \(s.keyId), \(s.signature))
            """, logger: logger)
    }
}

extension PostgresBackend {
    static let importedTables = [
        "products", "assets", "api_keys", "redemptions", "attempts", "revocations", "admin_actions", "ledger_events", "ledger_checkpoints",
        "ledger_head", "purchase_events", "deliveries", "content_pins",
    ]

    /// Runs `body` in one transaction over an empty, migrated database (``PostgresStoreError/notEmpty(_:)``
    /// otherwise), holding the chain's lock; then moves each identity sequence past the rows copied.
    public func importLedger(_ body: (PostgresImporter) async throws -> Void) async throws {
        try await unboundedTransaction { c in
            _ = try await PostgresChain.lock(c, logger: logger)
            for table in Self.importedTables {
                let rows = try await c.column("SELECT count(*) FROM \(unescaped: table)", Int64.self, logger: logger)
                if let count = rows.first, count > 0 { throw PostgresStoreError.notEmpty("\(table) has \(count) rows") }
            }
            try await body(PostgresImporter(c: c, logger: logger))
            // Redemptions and attempts are numbered under the chain's lock from the rows themselves
            // (migration 0002); the other chained tables keep an identity default.
            for table in ["revocations", "admin_actions", "purchase_events", "deliveries"] {
                try await c.checkedQuery(
                    """
                    SELECT setval(pg_get_serial_sequence(\(table), 'sequence'), coalesce((SELECT max(sequence) FROM \(unescaped: table)), 0) + 1, false)
                    """, logger: logger)
            }
        }
    }
}
