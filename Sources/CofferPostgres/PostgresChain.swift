import CofferCore
import Foundation
import Logging
import PostgresNIO

/// The hash chain in PostgreSQL (`ledger_events`, `ledger_checkpoints`, the seal `ledger_head`).
///
/// Every transaction that appends first takes one transaction-scoped advisory lock
/// (``lockKey``): the instances sharing the database append one after another, each reading
/// the head the previous one committed, so the chain stays linear. The lock is released by the
/// COMMIT or ROLLBACK itself — an instance killed mid-transaction holds nothing.
enum PostgresChain {
    /// Key of the advisory lock every appending transaction takes ("coffchai").
    static let lockKey: Int64 = 0x636f_6666_6368_6169

    struct Head {
        var sequence: Int64
        var hash: [UInt8]
        var hex: String { hash.hexString }
    }

    /// Takes the chain's lock for the rest of the transaction (waits for the instance holding it).
    static func lock(_ c: PostgresConnection, logger: Logger) async throws {
        try await c.query("SELECT pg_advisory_xact_lock(\(lockKey))", logger: logger)
    }

    /// The chain's last event (the genesis hash at 0 when empty) and the seal, in one query.
    /// Runs after ``lock(_:logger:)``: in READ COMMITTED each statement sees every commit made
    /// before it started, so this sees the head the previous lock holder committed.
    static func headAndSeal(_ c: PostgresConnection, logger: Logger) async throws -> (Head, LedgerCheckpoint?) {
        let rows = try await c.rows(
            """
            SELECT e.sequence AS head_sequence, e.entry_hash AS head_hash, h.sequence, h.entry_hash, h.time, h.key_id, h.signature
            FROM (SELECT 1) AS one
            LEFT JOIN LATERAL (SELECT sequence, entry_hash FROM ledger_events ORDER BY sequence DESC LIMIT 1) AS e ON true
            LEFT JOIN ledger_head AS h ON h.id = 1
            """, logger: logger
        ) { row -> (Head, LedgerCheckpoint?) in
            var head = Head(sequence: 0, hash: LedgerChain.genesis)
            if let sequence = try row.value("head_sequence", Int64?.self) {
                let hex = try row.value("head_hash", String.self)
                guard let hash = Hex.decode(hex), hash.count == 32 else { throw PostgresStoreError.invalidValue(column: "entry_hash", value: hex) }
                head = Head(sequence: sequence, hash: hash)
            }
            let seal = try row.value("sequence", Int64?.self) == nil ? nil : try LedgerCheckpoint(row: row)
            return (head, seal)
        }
        guard let first = rows.first else { return (Head(sequence: 0, hash: LedgerChain.genesis), nil) }
        return first
    }

    static func sealedHead(_ c: PostgresConnection, logger: Logger) async throws -> LedgerCheckpoint? {
        try await c.rows("SELECT \(unescaped: LedgerCheckpoint.columns) FROM ledger_head WHERE id = 1", logger: logger, LedgerCheckpoint.init(row:))
            .first
    }

    /// Throws unless the chain ends where the seal says (rules: ``CheckpointPolicy/verifySeal(_:headSequence:headHash:covering:)``).
    static func checkSeal(_ c: PostgresConnection, policy: CheckpointPolicy, head: Head, seal: LedgerCheckpoint?, logger: Logger) async throws {
        var covering: LedgerCheckpoint?
        if seal == nil && head.sequence > 0 {
            covering = try await c.rows(
                "SELECT \(unescaped: LedgerCheckpoint.columns) FROM ledger_checkpoints WHERE sequence = \(head.sequence)", logger: logger,
                LedgerCheckpoint.init(row:)
            ).first
        }
        try policy.verifySeal(seal, headSequence: head.sequence, headHash: head.hex, covering: covering)
    }

    /// Signs `head` and stores it as the seal (one row, rewritten).
    static func writeSeal(_ c: PostgresConnection, policy: CheckpointPolicy, head: Head, now: Date, logger: Logger) async throws {
        guard head.sequence > 0 else { return }
        let s = try policy.seal(headSequence: head.sequence, headHash: head.hex, now: now)
        try await c.query(
            """
            INSERT INTO ledger_head (id, sequence, entry_hash, time, key_id, signature) VALUES (1, \(s.sequence), \(s.entryHash), \(s.time), \(s.keyId), \(s.signature))
            ON CONFLICT (id) DO UPDATE SET sequence = excluded.sequence, entry_hash = excluded.entry_hash, time = excluded.time,
              key_id = excluded.key_id, signature = excluded.signature
            """, logger: logger)
    }

    /// Runs `body`, which appends after the head it is given and returns the new head, between
    /// the chain's lock and seal check and a new seal — in the caller's transaction. Without a
    /// policy (tools that hold no key) the lock is still taken but nothing is checked or sealed.
    static func sealed<T>(
        _ c: PostgresConnection, policy: CheckpointPolicy?, now: Date, logger: Logger, _ body: (Head) async throws -> (T, Head)
    ) async throws -> T {
        try await lock(c, logger: logger)
        let (head, seal) = try await headAndSeal(c, logger: logger)
        if let policy { try await checkSeal(c, policy: policy, head: head, seal: seal, logger: logger) }
        let (result, newHead) = try await body(head)
        if let policy, newHead.sequence != head.sequence { try await writeSeal(c, policy: policy, head: newHead, now: now, logger: logger) }
        return result
    }

    /// Throws when a value of `entry` holds U+0000, which PostgreSQL's text cannot store (the
    /// vault never lets one through — LedgerText; this is the last line, before any write).
    static func checkStorable(_ entry: LedgerEntry) throws {
        for value in entry.values {
            if let value, value.utf8.contains(0) {
                throw PostgresStoreError.invalidValue(column: entry.kind.rawValue, value: "a value holding U+0000")
            }
        }
    }

    /// Appends one event per entry after `head` (each entry built from its position), and the
    /// checkpoints that fall due on the policy's interval; returns the new head.
    static func append(
        _ c: PostgresConnection, policy: CheckpointPolicy?, head: Head, now: Date, entries: [(Int64) -> LedgerEntry], logger: Logger
    ) async throws -> Head {
        guard !entries.isEmpty else { return head }
        var current = head
        var sequences: [Int64] = []
        var kinds: [String] = []
        var rows: [Int64] = []
        var hashes: [String] = []
        var checkpoints: [LedgerCheckpoint] = []
        for make in entries {
            let entry = make(current.sequence + 1)
            try checkStorable(entry)
            current = Head(sequence: entry.sequence, hash: LedgerChain.hash(previous: current.hash, entry: entry))
            sequences.append(entry.sequence)
            kinds.append(entry.kind.rawValue)
            rows.append(entry.row)
            hashes.append(current.hex)
            if let policy, entry.sequence % policy.every == 0 {
                checkpoints.append(
                    try policy.signer.checkpoint(sequence: entry.sequence, entryHash: current.hex, time: Int64(now.timeIntervalSince1970)))
            }
        }
        try await c.query(
            """
            INSERT INTO ledger_events (sequence, kind, row_sequence, entry_hash)
            SELECT * FROM unnest(\(sequences)::bigint[], \(kinds)::text[], \(rows)::bigint[], \(hashes)::text[])
            """, logger: logger)
        for checkpoint in checkpoints { try await insert(c, checkpoint, logger: logger) }
        return current
    }

    static func insert(_ c: PostgresConnection, _ k: LedgerCheckpoint, logger: Logger) async throws {
        try await c.query(
            """
            INSERT INTO ledger_checkpoints (sequence, entry_hash, time, key_id, signature)
            VALUES (\(k.sequence), \(k.entryHash), \(k.time), \(k.keyId), \(k.signature))
            """, logger: logger)
    }

    static func latestCheckpoint(_ c: PostgresConnection, logger: Logger) async throws -> LedgerCheckpoint? {
        try await c.rows(
            "SELECT \(unescaped: LedgerCheckpoint.columns) FROM ledger_checkpoints ORDER BY sequence DESC LIMIT 1", logger: logger,
            LedgerCheckpoint.init(row:)
        ).first
    }

    static func checkpoints(_ c: PostgresConnection, after: Int64, limit: Int, logger: Logger) async throws -> [LedgerCheckpoint] {
        try await c.rows(
            "SELECT \(unescaped: LedgerCheckpoint.columns) FROM ledger_checkpoints WHERE sequence > \(after) ORDER BY sequence LIMIT \(max(0, limit))",
            logger: logger, LedgerCheckpoint.init(row:))
    }

    /// Appends an admin action and its event after `head`, in the caller's transaction.
    static func insert(_ c: PostgresConnection, _ action: AdminAction, policy: CheckpointPolicy?, head: Head, logger: Logger) async throws -> (
        AdminAction, Head
    ) {
        try checkStorable(.adminAction(action, sequence: 1))
        let sequences = try await c.column(
            """
            INSERT INTO admin_actions (at, key_id, key_name, action, target, detail, client_address)
            VALUES (\(action.at.timeIntervalSince1970), \(action.keyId), \(action.keyName), \(action.action), \(action.target), \(action.detail), \(action.clientAddress))
            RETURNING sequence
            """, Int64.self, logger: logger)
        var stored = action
        stored.sequence = sequences.first ?? 0
        let row = stored
        let newHead = try await append(c, policy: policy, head: head, now: action.at, entries: [{ .adminAction(row, sequence: $0) }], logger: logger)
        return (stored, newHead)
    }
}
