import CofferCore
import Foundation
import GRDB
import Synchronization

/// A stored ledger event, joined with the row it chains (nil when that row is gone).
public struct StoredEvent: Sendable, Hashable {
    public var sequence: Int64
    public var kind: LedgerEventKind
    public var row: Int64
    public var entryHash: String
    public var entry: LedgerEntry?
}

/// How checkpoints are made: every `every` entries (inside the appending transaction) and,
/// by the server's checkpoint service, every few seconds when the head has moved.
public struct CheckpointPolicy: Sendable {
    public var signer: LedgerSigner
    public var every: Int64
    /// The signature of the last seal this process wrote or verified, so the check before each
    /// write costs a string compare, not an Ed25519 verification.
    let lastSeal = SealCache()

    final class SealCache: Sendable {
        private let value = Mutex<String?>(nil)
        func withLock<T>(_ body: (inout String?) -> T) -> T { value.withLock { body(&$0) } }
    }

    public init(signer: LedgerSigner, every: Int64 = 1000) {
        self.signer = signer
        self.every = max(1, every)
    }
}

/// A write refused because the chain does not end where this server's key last sealed it.
public enum LedgerIntegrityError: Error, Sendable, CustomStringConvertible {
    /// A chain without a seal whose head no checkpoint of this key covers (a database from
    /// before the seal that was not shut down cleanly, or entries appended since).
    case unsealed(head: Int64)
    /// The chain ends elsewhere than the seal: entries appended, removed or rewritten.
    case sealMismatch(sealed: Int64, actual: Int64)
    /// The seal is not signed by this server's key.
    case sealNotSigned(keyId: String)

    public var description: String {
        switch self {
        case .unsealed(let head):
            "the ledger's head (entry \(head)) is covered by no seal or checkpoint of this server's key"
        case .sealMismatch(let sealed, let actual) where actual > sealed:
            "entries \(sealed + 1)–\(actual) were appended after the server last sealed the ledger at \(sealed): not by this server"
        case .sealMismatch(let sealed, let actual):
            "the ledger ends at \(actual) but the server sealed it at \(sealed): entries were removed or rewritten"
        case .sealNotSigned(let keyId):
            "the ledger's seal is not signed by this server's key \(keyId)"
        }
    }
}

/// The hash-chain writes and reads over `ledger_events` and `ledger_checkpoints`.
enum ChainStore {
    struct Head {
        var sequence: Int64
        var hash: [UInt8]
    }

    static func head(_ db: Database) throws -> Head {
        let statement = try db.cachedStatement(sql: "SELECT sequence, entry_hash FROM ledger_events ORDER BY sequence DESC LIMIT 1")
        guard let row = try Row.fetchOne(statement) else {
            return Head(sequence: 0, hash: LedgerChain.genesis)
        }
        let hex = try row.decode(String.self, forColumn: "entry_hash")
        guard let hash = hexBytes(hex), hash.count == 32 else { throw StoreError.invalidValue(column: "entry_hash", value: hex) }
        return Head(sequence: try row.decode(Int64.self, forColumn: "sequence"), hash: hash)
    }

    /// Appends the event for a row just inserted, in the caller's transaction; signs a
    /// checkpoint when the policy says so.
    static func append(_ db: Database, policy: CheckpointPolicy?, now: Date, entry: (Int64) -> LedgerEntry) throws {
        let head = try head(db)
        let event = entry(head.sequence + 1)
        // SQLite's C string readers stop at U+0000: a value holding one would be hashed whole
        // and read back cut, and the chain could never verify again. The vault never lets one
        // through (LedgerText); this is the last line.
        for value in event.values {
            if let value, value.utf8.contains(0) {
                throw StoreError.invalidValue(column: event.kind.rawValue, value: "a value holding U+0000")
            }
        }
        let hash = LedgerChain.hash(previous: head.hash, entry: event).hexString
        try db.cachedStatement(sql: "INSERT INTO ledger_events (sequence, kind, row_sequence, entry_hash) VALUES (?, ?, ?, ?)")
            .execute(arguments: [event.sequence, event.kind.rawValue, event.row, hash])
        if let policy, event.sequence % policy.every == 0 {
            try insert(db, try policy.signer.checkpoint(sequence: event.sequence, entryHash: hash, time: Int64(now.timeIntervalSince1970)))
        }
    }

    static func insert(_ db: Database, _ c: LedgerCheckpoint) throws {
        try db.execute(
            sql: "INSERT INTO ledger_checkpoints (sequence, entry_hash, time, key_id, signature) VALUES (?, ?, ?, ?, ?)",
            arguments: [c.sequence, c.entryHash, c.time, c.keyId, c.signature])
    }

    static func checkpoint(_ row: Row) throws -> LedgerCheckpoint {
        LedgerCheckpoint(
            sequence: try row.decode(forColumn: "sequence"), entryHash: try row.decode(forColumn: "entry_hash"),
            time: try row.decode(forColumn: "time"),
            keyId: try row.decode(forColumn: "key_id"), signature: try row.decode(forColumn: "signature"))
    }

    static func checkpoints(_ db: Database, after: Int64, limit: Int) throws -> [LedgerCheckpoint] {
        try Row.fetchAll(db, sql: "SELECT * FROM ledger_checkpoints WHERE sequence > ? ORDER BY sequence LIMIT ?", arguments: [after, limit])
            .map(checkpoint)
    }

    static func latestCheckpoint(_ db: Database) throws -> LedgerCheckpoint? {
        try Row.fetchOne(db, sql: "SELECT * FROM ledger_checkpoints ORDER BY sequence DESC LIMIT 1").map(checkpoint)
    }

    static func hexBytes(_ hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case 0x30...0x39: c - 0x30
            case 0x61...0x66: c - 0x61 + 10
            default: nil
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(digits.count / 2)
        var i = 0
        while i < digits.count {
            guard let hi = nibble(digits[i]), let lo = nibble(digits[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        return out
    }

    /// Events after `after`, in order, each joined with its row.
    static func events(_ db: Database, after: Int64, limit: Int) throws -> [StoredEvent] {
        let rows = try Row.fetchAll(
            db, sql: "SELECT sequence, kind, row_sequence, entry_hash FROM ledger_events WHERE sequence > ? ORDER BY sequence LIMIT ?",
            arguments: [after, limit])
        var events: [StoredEvent] = []
        var redemptionRows: [Int64] = []
        var attemptRows: [Int64] = []
        var revocationRows: [Int64] = []
        var adminRows: [Int64] = []
        for row in rows {
            let kindName = try row.decode(String.self, forColumn: "kind")
            guard let kind = LedgerEventKind(rawValue: kindName) else { throw StoreError.invalidValue(column: "kind", value: kindName) }
            let event = StoredEvent(
                sequence: try row.decode(forColumn: "sequence"), kind: kind, row: try row.decode(forColumn: "row_sequence"),
                entryHash: try row.decode(forColumn: "entry_hash"), entry: nil)
            events.append(event)
            switch kind {
            case .redemption: redemptionRows.append(event.row)
            case .attempt: attemptRows.append(event.row)
            case .revocation: revocationRows.append(event.row)
            case .adminAction: adminRows.append(event.row)
            }
        }
        let redemptions = Dictionary(
            try RedemptionRecord.filter(redemptionRows.contains(RedemptionRecord.Columns.sequence)).fetchAll(db).map {
                ($0.redemption.sequence, $0.redemption)
            },
            uniquingKeysWith: { a, _ in a })
        let attempts = Dictionary(
            try AttemptRecord.filter(attemptRows.contains(AttemptRecord.Columns.sequence)).fetchAll(db).map { ($0.attempt.sequence, $0.attempt) },
            uniquingKeysWith: { a, _ in a })
        let revocations = Dictionary(
            try Row.fetchAll(
                db, sql: "SELECT * FROM revocations WHERE sequence IN (SELECT value FROM json_each(?))",
                arguments: [String(decoding: try JSONEncoder().encode(revocationRows), as: UTF8.self)]
            ).map { row in
                let r = try revocation(row); return (r.sequence, r)
            },
            uniquingKeysWith: { a, _ in a })
        let adminActions = Dictionary(
            try Row.fetchAll(
                db, sql: "SELECT * FROM admin_actions WHERE sequence IN (SELECT value FROM json_each(?))",
                arguments: [String(decoding: try JSONEncoder().encode(adminRows), as: UTF8.self)]
            ).map { row in
                let a = try adminAction(row); return (a.sequence, a)
            },
            uniquingKeysWith: { a, _ in a })
        for i in events.indices {
            let e = events[i]
            switch e.kind {
            case .redemption: events[i].entry = redemptions[e.row].map { LedgerEntry.redemption($0, sequence: e.sequence) }
            case .attempt: events[i].entry = attempts[e.row].map { LedgerEntry.attempt($0, sequence: e.sequence) }
            case .revocation: events[i].entry = revocations[e.row].map { LedgerEntry.revocation($0, sequence: e.sequence) }
            case .adminAction: events[i].entry = adminActions[e.row].map { LedgerEntry.adminAction($0, sequence: e.sequence) }
            }
        }
        return events
    }

    static func adminAction(_ row: Row) throws -> AdminAction {
        AdminAction(
            sequence: try row.decode(forColumn: "sequence"), at: Date(timeIntervalSince1970: try row.decode(Double.self, forColumn: "at")),
            keyId: try row.decode(forColumn: "key_id"), keyName: try row.decode(forColumn: "key_name"), action: try row.decode(forColumn: "action"),
            target: try row.decode(forColumn: "target"), detail: try row.decode(forColumn: "detail"),
            clientAddress: try row.decode(forColumn: "client_address"))
    }

    /// Appends an admin action and its chain event, in the caller's transaction.
    @discardableResult
    static func insert(_ db: Database, _ a: AdminAction, policy: CheckpointPolicy?) throws -> AdminAction {
        try db.execute(
            sql: """
                INSERT INTO admin_actions (at, key_id, key_name, action, target, detail, client_address)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                """,
            arguments: [a.at.timeIntervalSince1970, a.keyId, a.keyName, a.action, a.target, a.detail, a.clientAddress])
        var row = a
        row.sequence = db.lastInsertedRowID
        let stored = row
        try append(db, policy: policy, now: a.at) { .adminAction(stored, sequence: $0) }
        return stored
    }

    static func revocation(_ row: Row) throws -> Revocation {
        let source = try row.decode(String.self, forColumn: "source")
        return Revocation(
            sequence: try row.decode(forColumn: "sequence"), redemptionId: try row.decode(forColumn: "redemption_id"),
            transactionId: try row.decode(forColumn: "transaction_id"),
            revokedAt: Date(timeIntervalSince1970: try row.decode(Double.self, forColumn: "revoked_at")), reason: try row.decode(forColumn: "reason"),
            source: try Revocation.Source(rawValue: source).orThrow(StoreError.invalidValue(column: "source", value: source)),
            reference: try row.decode(forColumn: "reference"),
            recordedAt: Date(timeIntervalSince1970: try row.decode(Double.self, forColumn: "recorded_at")),
            environment: try row.decode(forColumn: "environment"), replayKey: try row.decode(forColumn: "replay_key"))
    }

    static func insert(_ db: Database, _ r: Revocation) throws -> Revocation {
        try db.execute(
            sql: """
                INSERT INTO revocations (redemption_id, transaction_id, revoked_at, reason, source, reference, recorded_at, environment, replay_key)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
            arguments: [
                r.redemptionId, r.transactionId, r.revokedAt.timeIntervalSince1970, r.reason, r.source.rawValue, r.reference,
                r.recordedAt.timeIntervalSince1970, r.environment, r.replayKey,
            ])
        var row = r
        row.sequence = db.lastInsertedRowID
        return row
    }

    /// Rows of the chained tables that no event chains, oldest first (at most `limit`).
    static func unchainedRows(_ db: Database, limit: Int) throws -> [(kind: LedgerEventKind, row: Int64, at: Double)] {
        let rows = try Row.fetchAll(
            db,
            sql: """
                SELECT 'redemption' AS kind, sequence, redeemed_at AS at FROM redemptions r
                  WHERE NOT EXISTS (SELECT 1 FROM ledger_events e WHERE e.kind = 'redemption' AND e.row_sequence = r.sequence)
                UNION ALL
                SELECT 'attempt', sequence, at FROM attempts a
                  WHERE NOT EXISTS (SELECT 1 FROM ledger_events e WHERE e.kind = 'attempt' AND e.row_sequence = a.sequence)
                UNION ALL
                SELECT 'revocation', sequence, recorded_at FROM revocations v
                  WHERE NOT EXISTS (SELECT 1 FROM ledger_events e WHERE e.kind = 'revocation' AND e.row_sequence = v.sequence)
                UNION ALL
                SELECT 'adminAction', sequence, at FROM admin_actions m
                  WHERE NOT EXISTS (SELECT 1 FROM ledger_events e WHERE e.kind = 'adminAction' AND e.row_sequence = m.sequence)
                ORDER BY at, kind, sequence LIMIT ?
                """, arguments: [limit])
        return try rows.compactMap { row in
            guard let kind = LedgerEventKind(rawValue: try row.decode(String.self, forColumn: "kind")) else { return nil }
            return (kind: kind, row: try row.decode(Int64.self, forColumn: "sequence"), at: try row.decode(Double.self, forColumn: "at"))
        }
    }
}

extension Optional {
    /// The value, or `error` thrown.
    func orThrow(_ error: @autoclosure () -> any Error) throws -> Wrapped {
        guard let value = self else { throw error() }
        return value
    }
}

extension ChainStore {
    /// The stored revocation of a purchase (environment and replay key), if any.
    /// The revocation stored with this environment and replay key (rows written since migration 0003).
    static func keyedRevocation(_ db: Database, environment: String?, replayKey: String) throws -> Revocation? {
        let statement = try db.cachedStatement(
            sql: "SELECT * FROM revocations WHERE coalesce(environment, '') = ? AND coalesce(replay_key, transaction_id) = ? LIMIT 1")
        return try Row.fetchOne(statement, arguments: [environment ?? "", replayKey]).map(revocation)
    }

    /// The revocation of a purchase, also one from before migration 0003: those carry no
    /// environment or key but name the redemption they revoked, which carries both. Every
    /// lookup is one indexed search (an OR across columns would scan the table).
    static func revocation(_ db: Database, environment: String?, replayKey: String) throws -> Revocation? {
        if let found = try keyedRevocation(db, environment: environment, replayKey: replayKey) { return found }
        let legacy = try db.cachedStatement(sql: "SELECT * FROM revocations WHERE redemption_id = ? AND environment IS NULL LIMIT 1")
        for redemptionId in try redemptionIds(db, environment: environment ?? "", replayKey: replayKey) {
            if let found = try Row.fetchOne(legacy, arguments: [redemptionId]).map(revocation) { return found }
        }
        return nil
    }

    /// The redemptions of a purchase, oldest first: by environment and replay key, and — for rows
    /// from before migration 0003, keyed by their transaction id — by original transaction id.
    static func redemptionIds(_ db: Database, environment: String, replayKey: String) throws -> [String] {
        let keyed = try db.cachedStatement(
            sql: "SELECT redemption_id FROM redemptions WHERE environment = ? AND coalesce(replay_key, transaction_id) = ? LIMIT 1")
        let legacy = try db.cachedStatement(
            sql: """
                SELECT redemption_id FROM redemptions WHERE original_transaction_id = ? AND replay_key IS NULL AND environment = ?
                ORDER BY sequence LIMIT 10
                """)
        return try String.fetchAll(keyed, arguments: [environment, replayKey]) + String.fetchAll(legacy, arguments: [replayKey, environment])
    }

    /// Whether a redemption of this purchase is in the ledger: same environment and replay key,
    /// or — for rows from before migration 0003, keyed by their transaction id — the same
    /// original transaction id (a non-consumable restored then was redeemed under a new id).
    static func isRedeemed(_ db: Database, environment: String, replayKey: String) throws -> Bool {
        let keyed = try db.cachedStatement(
            sql: "SELECT 1 FROM redemptions WHERE environment = ? AND coalesce(replay_key, transaction_id) = ? LIMIT 1")
        if try Bool.fetchOne(keyed, arguments: [environment, replayKey]) == true { return true }
        let legacy = try db.cachedStatement(
            sql: "SELECT 1 FROM redemptions WHERE original_transaction_id = ? AND replay_key IS NULL AND environment = ? LIMIT 1")
        return try Bool.fetchOne(legacy, arguments: [replayKey, environment]) == true
    }

    /// The schema objects the ledger's guarantees rest on, missing or altered (empty when intact):
    /// the append-only triggers and the unique indexes of the replay rule.
    static func schemaProblems(_ db: Database) throws -> [String] {
        var problems: [String] = []
        let triggers = Set(try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'trigger'"))
        for table in ["redemptions", "attempts", "revocations", "ledger_events", "ledger_checkpoints", "admin_actions"] {
            for operation in ["update", "delete"] where !triggers.contains("\(table)_no_\(operation)") {
                problems.append("trigger \(table)_no_\(operation) is missing")
            }
        }
        for (table, index) in [("redemptions", "redemptions_replay"), ("revocations", "revocations_key")] {
            let unique = try Row.fetchAll(db, sql: "PRAGMA index_list(\(table))").first { ($0["name"] as String?) == index }?["unique"] as Int?
            if unique != 1 { problems.append("unique index \(index) is missing or not unique") }
        }
        return problems
    }
}

// MARK: - The seal

extension ChainStore {
    static func sealedHead(_ db: Database) throws -> LedgerCheckpoint? {
        try Row.fetchOne(db.cachedStatement(sql: "SELECT * FROM ledger_head WHERE id = 1")).map(checkpoint)
    }

    /// Throws unless the chain ends exactly where the seal says, under `policy`'s key. A chain
    /// with no seal yet (written before migration 0003) passes when a checkpoint of this key
    /// covers its head exactly (it was shut down cleanly).
    static func checkSeal(_ db: Database, policy: CheckpointPolicy) throws {
        let head = try head(db)
        guard let sealed = try sealedHead(db) else {
            guard head.sequence > 0 else { return }
            let covering = try Row.fetchOne(db, sql: "SELECT * FROM ledger_checkpoints WHERE sequence = ?", arguments: [head.sequence]).map(
                checkpoint)
            guard let covering, covering.entryHash == head.hash.hexString, covering.isSigned(by: policy.signer.publicKey) else {
                throw LedgerIntegrityError.unsealed(head: head.sequence)
            }
            return
        }
        if policy.lastSeal.withLock({ $0 }) != sealed.signature {
            guard sealed.isSigned(by: policy.signer.publicKey) else { throw LedgerIntegrityError.sealNotSigned(keyId: policy.signer.keyId) }
            policy.lastSeal.withLock { $0 = sealed.signature }
        }
        guard sealed.sequence == head.sequence, sealed.entryHash == head.hash.hexString else {
            throw LedgerIntegrityError.sealMismatch(sealed: sealed.sequence, actual: head.sequence)
        }
    }

    /// Signs the chain's current head and stores it as the seal (one row, rewritten).
    static func seal(_ db: Database, policy: CheckpointPolicy, now: Date) throws {
        let head = try head(db)
        guard head.sequence > 0 else { return }
        let sealed = try policy.signer.checkpoint(sequence: head.sequence, entryHash: head.hash.hexString, time: Int64(now.timeIntervalSince1970))
        try db.cachedStatement(
            sql: """
                INSERT INTO ledger_head (id, sequence, entry_hash, time, key_id, signature) VALUES (1, ?, ?, ?, ?, ?)
                ON CONFLICT (id) DO UPDATE SET sequence = excluded.sequence, entry_hash = excluded.entry_hash, time = excluded.time,
                  key_id = excluded.key_id, signature = excluded.signature
                """
        ).execute(arguments: [sealed.sequence, sealed.entryHash, sealed.time, sealed.keyId, sealed.signature])
        policy.lastSeal.withLock { $0 = sealed.signature }
    }

    /// Runs `body`, which appends, between a seal check and a new seal, in the caller's
    /// transaction. Without a policy (tools that hold no key) it only runs `body`.
    static func sealed<T>(_ db: Database, policy: CheckpointPolicy?, now: Date, _ body: () throws -> T) throws -> T {
        guard let policy else { return try body() }
        try checkSeal(db, policy: policy)
        let result = try body()
        try seal(db, policy: policy, now: now)
        return result
    }
}
