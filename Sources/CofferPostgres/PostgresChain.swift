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

        init(sequence: Int64, hash: [UInt8]) {
            self.sequence = sequence
            self.hash = hash
        }

        /// The last event's sequence and hash as a query returned them; the genesis hash at 0
        /// when the chain is empty (both NULL).
        init(row: PostgresRandomAccessRow, sequence: String, hash: String) throws {
            guard let last = try row.value(sequence, Int64?.self) else {
                self.init(sequence: 0, hash: LedgerChain.genesis)
                return
            }
            let hex = try row.value(hash, String.self)
            guard let bytes = Hex.decode(hex), bytes.count == 32 else { throw PostgresStoreError.invalidValue(column: "entry_hash", value: hex) }
            self.init(sequence: last, hash: bytes)
        }
    }

    /// What an appending transaction reads once it holds the chain's lock.
    struct Locked {
        var head: Head
        var seal: LedgerCheckpoint?
        /// Of the purchases asked about: those already redeemed.
        var redeemed: Set<PurchaseKey>
        /// Of the purchases asked about: the sequences of their kept revocations.
        var revoked: [Int64]
        /// The numbers the next redemption and the next attempt take (rows are numbered under the lock).
        var nextRedemption: Int64
        var nextAttempt: Int64
    }

    /// Takes the chain's lock for the rest of the transaction (waits for the instance holding
    /// it), then reads the head, the seal and the replay rule's lookups for `purchases` — one
    /// round trip (`coffer_lock_chain`, migration 0002: its reads see every commit made before
    /// the lock was granted).
    static func lock(_ c: PostgresConnection, purchases: [PurchaseKey] = [], logger: Logger) async throws -> Locked {
        try await state(
            c, query: "SELECT * FROM coffer_lock_chain(\(lockKey), \(purchases.map(\.environment))::text[], \(purchases.map(\.key))::text[])",
            logger: logger)
    }

    /// Takes the chain's lock for this session (waits for the instance holding it), outside a
    /// transaction block, then reads what ``lock(_:purchases:logger:)`` reads (`coffer_take_chain`,
    /// migration 0004). The lock outlasts this statement: the caller's append —
    /// ``PostgresRows/write(_:redemptions:attempts:linked:release:logger:)`` with ``lockKey`` —
    /// commits and then lets it go. Two round trips per batch instead of four. A caller that
    /// fails in between must let the lock go (``PostgresBackend/chainTurn(_:)`` does).
    static func take(_ c: PostgresConnection, purchases: [PurchaseKey] = [], logger: Logger) async throws -> Locked {
        try await state(
            c, query: "SELECT * FROM coffer_take_chain(\(lockKey), \(purchases.map(\.environment))::text[], \(purchases.map(\.key))::text[])",
            logger: logger)
    }

    private static func state(_ c: PostgresConnection, query: PostgresQuery, logger: Logger) async throws -> Locked {
        let rows = try await c.rows(query, logger: logger) { row -> Locked in
            let head = try Head(row: row, sequence: "head_sequence", hash: "head_hash")
            var seal: LedgerCheckpoint?
            if let sequence = try row.value("seal_sequence", Int64?.self) {
                seal = LedgerCheckpoint(
                    sequence: sequence, entryHash: try row.value("seal_hash"), time: try row.value("seal_time"), keyId: try row.value("seal_key_id"),
                    signature: try row.value("seal_signature"))
            }
            let environments = try row.value("redeemed_environments", [String].self)
            let keys = try row.value("redeemed_keys", [String].self)
            guard environments.count == keys.count else {
                throw PostgresStoreError.invalidValue(column: "redeemed_keys", value: "\(keys.count) keys for \(environments.count) environments")
            }
            let redeemed = Set(zip(environments, keys).map { PurchaseKey(environment: $0, key: $1) })
            return Locked(
                head: head, seal: seal, redeemed: redeemed, revoked: try row.value("revoked", [Int64].self),
                nextRedemption: try row.value("next_redemption"), nextAttempt: try row.value("next_attempt"))
        }
        guard let first = rows.first else { throw PostgresStoreError.invalidValue(column: "coffer_chain_state", value: "no row") }
        return first
    }

    /// The chain's last event (the genesis hash at 0 when empty) and the seal, in one query,
    /// without the lock (readers: what an appender sees comes from ``lock(_:purchases:logger:)``).
    static func headAndSeal(_ c: PostgresConnection, logger: Logger) async throws -> (Head, LedgerCheckpoint?) {
        let rows = try await c.rows(
            """
            SELECT e.sequence AS head_sequence, e.entry_hash AS head_hash, h.sequence, h.entry_hash, h.time, h.key_id, h.signature
            FROM (SELECT 1) AS one
            LEFT JOIN LATERAL (SELECT sequence, entry_hash FROM ledger_events ORDER BY sequence DESC LIMIT 1) AS e ON true
            LEFT JOIN ledger_head AS h ON h.id = 1
            """, logger: logger
        ) { row -> (Head, LedgerCheckpoint?) in
            let head = try Head(row: row, sequence: "head_sequence", hash: "head_hash")
            let seal = try row.value("sequence", Int64?.self) == nil ? nil : try LedgerCheckpoint(row: row)
            return (head, seal)
        }
        guard let first = rows.first else { return (Head(sequence: 0, hash: LedgerChain.genesis), nil) }
        return first
    }

    /// Lets the writer's session lock go (`coffer_abandon_chain`); when that fails, closes the
    /// connection, so the server lets it go with the session and the pool never gets it back.
    /// A closed connection's session, and its lock, are gone already: nothing is sent on it.
    /// postgres-nio may never answer a query written to a closed connection (it wedged the
    /// writer after a session ended during its CALL); every statement here is a
    /// ``PostgresConnection/checkedQuery(_:logger:)``, and this check is the quick way out.
    static func letGo(_ c: PostgresConnection, logger: Logger) async {
        guard !c.isClosed else { return }
        do {
            _ = try await c.column("SELECT coffer_abandon_chain()", Bool.self, logger: logger)
        } catch {
            logger.warning("closing a connection that could not let the chain's lock go", metadata: ["error": "\(error)"])
            try? await c.close()
        }
    }

    /// Waits until the server's WAL is flushed through everything committed so far: one WAL
    /// record — the flush record, or without EXECUTE on `pg_logical_emit_message` a row lock
    /// of the seal (as `coffer_flush`, migration 0006) — in a transaction of its own, whose
    /// COMMIT waits as the session's `synchronous_commit` says (on: flushed; with synchronous
    /// standbys, until they confirm). For a batch whose CALL failed after its COMMIT, which
    /// migration 0005 makes without waiting for the flush, for a CALL that may have had its
    /// wait cut short (``shortestTimer``), and for readers that publish what they read
    /// (``flushed(_:logger:_:)``).
    ///
    /// A COMMIT statement of its own, not `CALL coffer_flush()`: PostgreSQL ends a wait for
    /// synchronous standbys when its statement is cancelled — by `statement_timeout` too — and
    /// reports the commit done, with only a WARNING (which postgres-nio drops). A COMMIT inside
    /// a CALL runs under the CALL's timer; a COMMIT statement does not (PostgreSQL stops the
    /// timer before it commits). Nothing to do on a standby, in a read-only transaction (tools
    /// reading as the audit role), or where `synchronous_commit` does not wait for flushes.
    /// Called outside a transaction block (its COMMIT would end the caller's); the COMMIT is
    /// tagged `/* coffer flush */` for pg_stat_activity.
    static func flush(_ c: PostgresConnection, logger: Logger) async throws {
        try await c.checkedQuery("BEGIN", logger: logger)
        do {
            // Which record, in a statement of its own: a statement naming pg_logical_emit_message
            // or FOR KEY SHARE fails without the privilege or read-only, branch taken or not.
            let record = try await c.column(
                """
                SELECT CASE
                  WHEN pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'
                    OR current_setting('synchronous_commit') NOT IN ('on', 'remote_apply', 'remote_write', 'local') THEN 'none'
                  WHEN coffer_flush_after() THEN 'message' ELSE 'lock' END
                """, String.self, logger: logger)
            switch record.first {
            case "message": try await c.checkedQuery("SELECT pg_logical_emit_message(true, 'coffer', '')", logger: logger)
            case "lock": try await c.checkedQuery("SELECT 1 FROM ledger_head FOR KEY SHARE", logger: logger)
            default: break
            }
            try await c.checkedQuery("COMMIT /* coffer flush */", logger: logger)
        } catch {
            await c.rollbackIfOpen(logger: logger)
            throw error
        }
    }

    /// A CALL that ran this long may have had its COMMIT's wait for synchronous standbys ended
    /// by its statement timeout, reported as done: the writer then ``flush(_:logger:)``es
    /// before it answers. The instances' sessions run with 15 s, and the writer refuses a
    /// session that runs with under twice this (``PostgresBackend/sessionProblem(timeoutSeconds:isolation:asked:synchronousCommit:)``).
    /// Measured by the writer from before it sends the CALL: the server's timer starts when the
    /// statement reaches it, so a CALL that timer ended took at least as long there.
    static let shortestTimer: Duration = .seconds(1)

    /// Runs the read `body`, then ``flush(_:logger:)``: whatever it read was committed before
    /// the flush began, so it is durable when this returns — for answers that publish signed
    /// material (checkpoints, the seal, chained events), which must never name a batch that a
    /// crash of the server then loses.
    static func flushed<T>(_ c: PostgresConnection, logger: Logger, _ body: () async throws -> T) async throws -> T {
        let result = try await body()
        try await flush(c, logger: logger)
        return result
    }

    /// The hash of the event at `sequence`; nil when there is none.
    static func eventHash(_ c: PostgresConnection, sequence: Int64, logger: Logger) async throws -> String? {
        try await c.column("SELECT entry_hash FROM ledger_events WHERE sequence = \(sequence)", String.self, logger: logger).first
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

    /// Signs `head` and stores it as the seal (one row, rewritten), with the statement appends use.
    static func writeSeal(_ c: PostgresConnection, policy: CheckpointPolicy, head: Head, now: Date, logger: Logger) async throws {
        guard head.sequence > 0 else { return }
        var linked = Linked(head: head)
        linked.seal = try policy.seal(headSequence: head.sequence, headHash: head.hex, now: now)
        try await PostgresRows.write(c, redemptions: [], attempts: [], linked: linked, logger: logger)
    }

    /// Runs `body`, which appends after the head it is given (with ``append(_:policy:head:now:entries:logger:)``
    /// or ``PostgresRows/write(_:redemptions:attempts:linked:logger:)``, which also rewrite the
    /// seal), after the chain's lock and seal check — in the caller's transaction. `purchases` are looked up for the replay rule under
    /// the lock. Without a policy (tools that hold no key) the lock is still taken but nothing
    /// is checked or sealed.
    static func sealed<T>(
        _ c: PostgresConnection, policy: CheckpointPolicy?, purchases: [PurchaseKey] = [], logger: Logger,
        _ body: (Locked) async throws -> T
    ) async throws -> T {
        let locked = try await lock(c, purchases: purchases, logger: logger)
        if let policy { try await checkSeal(c, policy: policy, head: locked.head, seal: locked.seal, logger: logger) }
        return try await body(locked)
    }

    /// Throws when a value of `entry` holds U+0000, which PostgreSQL's text cannot store (the
    /// vault never lets one through — LedgerText; this is the last line, before any write).
    /// Also when a redemption's quantity does not fit the column's integer: stored clamped, it
    /// would no longer match the hash of the value given (the vault refuses one first).
    static func checkStorable(_ entry: LedgerEntry) throws {
        for value in entry.values {
            if let value, value.utf8.contains(0) {
                throw PostgresStoreError.invalidValue(column: entry.kind.rawValue, value: "a value holding U+0000")
            }
        }
        if entry.kind == .redemption, let index = quantityField, index < entry.values.count, let quantity = entry.values[index],
            Int32(quantity) == nil
        {
            throw PostgresStoreError.invalidValue(column: "redemptions.quantity", value: "\(quantity.prefix(24)), beyond PostgreSQL's integer")
        }
    }

    /// Where a redemption entry holds its quantity.
    private static let quantityField = LedgerEntry.fieldNames(for: .redemption).firstIndex(of: "quantity")

    /// What an append writes: the events, the checkpoints due and (with a policy) the new seal.
    struct Linked {
        var sequences: [Int64] = []
        var kinds: [String] = []
        var rows: [Int64] = []
        var hashes: [String] = []
        var checkpoints: [LedgerCheckpoint] = []
        var seal: LedgerCheckpoint?
        var head: Head
    }

    /// Chains one event per entry after `head` (each entry built from its position), signs the
    /// checkpoints that fall due on the policy's interval and the new head's seal. No I/O.
    static func link(policy: CheckpointPolicy?, head: Head, now: Date, entries: [(Int64) -> LedgerEntry]) throws -> Linked {
        var linked = Linked(head: head)
        guard !entries.isEmpty else { return linked }
        for make in entries {
            let entry = make(linked.head.sequence + 1)
            try checkStorable(entry)
            linked.head = Head(sequence: entry.sequence, hash: LedgerChain.hash(previous: linked.head.hash, entry: entry))
            linked.sequences.append(entry.sequence)
            linked.kinds.append(entry.kind.rawValue)
            linked.rows.append(entry.row)
            linked.hashes.append(linked.head.hex)
            if let policy, entry.sequence % policy.every == 0 {
                linked.checkpoints.append(
                    try policy.signer.checkpoint(sequence: entry.sequence, entryHash: linked.head.hex, time: Int64(now.timeIntervalSince1970)))
            }
        }
        linked.seal = try policy?.seal(headSequence: linked.head.sequence, headHash: linked.head.hex, now: now)
        return linked
    }

    /// Appends one event per entry after `head`, the checkpoints due and, with a policy, the new
    /// head's seal — one statement (``PostgresRows/write(_:redemptions:attempts:linked:logger:)``).
    static func append(
        _ c: PostgresConnection, policy: CheckpointPolicy?, head: Head, now: Date, entries: [(Int64) -> LedgerEntry], logger: Logger
    ) async throws {
        let linked = try link(policy: policy, head: head, now: now, entries: entries)
        guard !linked.sequences.isEmpty else { return }
        try await PostgresRows.write(c, redemptions: [], attempts: [], linked: linked, logger: logger)
    }

    static func insert(_ c: PostgresConnection, _ k: LedgerCheckpoint, logger: Logger) async throws {
        try await c.checkedQuery(
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
    static func insert(_ c: PostgresConnection, _ action: AdminAction, policy: CheckpointPolicy?, head: Head, logger: Logger) async throws
        -> AdminAction
    {
        let row = try await insertRow(c, action, logger: logger)
        try await append(c, policy: policy, head: head, now: action.at, entries: [{ .adminAction(row, sequence: $0) }], logger: logger)
        return row
    }

    /// Inserts an admin action's row (no chain event: the caller appends it) and returns it with
    /// its sequence.
    static func insertRow(_ c: PostgresConnection, _ action: AdminAction, logger: Logger) async throws -> AdminAction {
        try checkStorable(.adminAction(action, sequence: 1))
        let sequences = try await c.column(
            """
            INSERT INTO admin_actions (at, key_id, key_name, action, target, detail, client_address)
            VALUES (\(action.at.timeIntervalSince1970), \(action.keyId), \(action.keyName), \(action.action), \(action.target), \(action.detail), \(action.clientAddress))
            RETURNING sequence
            """, Int64.self, logger: logger)
        var stored = action
        stored.sequence = sequences.first ?? 0
        return stored
    }

    /// Records an admin change's entry (escaped for the ledger) in the admin log, chained and
    /// sealed, in the caller's transaction — the change's own, after its writes: the chain's
    /// lock is taken last, so redemptions wait for it no longer than for any admin entry.
    /// Nothing without an entry.
    static func log(_ c: PostgresConnection, _ action: AdminAction?, policy: CheckpointPolicy?, logger: Logger) async throws {
        guard let action else { return }
        let stored = AdminAction.escapedForLedger(action)
        try await sealed(c, policy: policy, logger: logger) { locked in
            _ = try await insert(c, stored, policy: policy, head: locked.head, logger: logger)
        }
    }
}
