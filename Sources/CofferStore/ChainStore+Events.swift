import CofferCore
import GRDB

extension ChainStore {
    /// Events after `after`, in order, each joined with its row.
    static func events(_ db: Database, after: Int64, limit: Int) throws -> [StoredEvent] {
        let statement = try db.cachedStatement(
            sql: "SELECT sequence, kind, row_sequence, entry_hash FROM ledger_events WHERE sequence > ? ORDER BY sequence LIMIT ?")
        var events = try LedgerEventRecord.fetchAll(statement, arguments: [after, limit]).map { try $0.storedEvent() }
        let rows = try ChainedRows(db, events.map { (kind: $0.kind, row: $0.row) })
        for i in events.indices {
            events[i].entry = rows.entry(events[i].kind, row: events[i].row)?(events[i].sequence)
        }
        return events
    }
}

/// Rows of the chained tables, fetched by sequence number one query a table, ready to be
/// made into the ledger entries that chain them.
struct ChainedRows {
    private var redemptions: [Int64: Redemption] = [:]
    private var attempts: [Int64: RejectedAttempt] = [:]
    private var revocations: [Int64: Revocation] = [:]
    private var adminActions: [Int64: AdminAction] = [:]
    private var purchaseEvents: [Int64: PurchaseEvent] = [:]

    /// The rows named by `wanted`, as they are in `db` (a row that is gone is left out).
    init(_ db: Database, _ wanted: [(kind: LedgerEventKind, row: Int64)]) throws {
        let keys = Dictionary(grouping: wanted, by: \.kind).mapValues { $0.map(\.row) }
        redemptions = Self.bySequence(try RedemptionRecord.fetchAll(db, keys: keys[.redemption] ?? []).map(\.redemption), \.sequence)
        attempts = Self.bySequence(try AttemptRecord.fetchAll(db, keys: keys[.attempt] ?? []).map(\.attempt), \.sequence)
        revocations = Self.bySequence(try RevocationRecord.fetchAll(db, keys: keys[.revocation] ?? []).map { try $0.revocation() }, \.sequence)
        adminActions = Self.bySequence(try AdminActionRecord.fetchAll(db, keys: keys[.adminAction] ?? []).map(\.adminAction), \.sequence)
        purchaseEvents = Self.bySequence(try PurchaseEventRecord.fetchAll(db, keys: keys[.purchaseEvent] ?? []).map { try $0.event() }, \.sequence)
    }

    /// The entry chaining row `row` of `kind`, given its position in the chain; nil when that
    /// row is gone.
    func entry(_ kind: LedgerEventKind, row: Int64) -> ((Int64) -> LedgerEntry)? {
        switch kind {
        case .redemption: redemptions[row].map { redemption in { .redemption(redemption, sequence: $0) } }
        case .attempt: attempts[row].map { attempt in { .attempt(attempt, sequence: $0) } }
        case .revocation: revocations[row].map { revocation in { .revocation(revocation, sequence: $0) } }
        case .adminAction: adminActions[row].map { action in { .adminAction(action, sequence: $0) } }
        case .purchaseEvent: purchaseEvents[row].map { event in { .purchaseEvent(event, sequence: $0) } }
        }
    }

    private static func bySequence<T>(_ rows: [T], _ sequence: KeyPath<T, Int64>) -> [Int64: T] {
        Dictionary(rows.map { ($0[keyPath: sequence], $0) }, uniquingKeysWith: { first, _ in first })
    }
}
