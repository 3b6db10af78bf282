import CofferCore
import CofferPostgres
import CofferStore
import Crypto
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// `coffer ledger copy`: a data directory's SQLite ledger — chain, checkpoints, seal, attempts,
/// revocations, admin log, keys, catalogue and content pins — into an empty PostgreSQL database, in one
/// transaction, every row with its sequence number and values; then the copy is verified with
/// `publicKey`, as the original is. The upgrade path for a deployment that outgrew one box.
/// The command copies from a ``Snapshot`` it has verified and checked against the high-water
/// mark (``Snapshot/checkHighWater()``).
public enum LedgerCopy {
    /// What was copied, and the copy's audit.
    public struct Summary: Sendable {
        public var counts: [(table: String, rows: Int)]
        public var audit: LedgerAuditReport
    }

    static let page = 1000

    /// A consistent copy of a data directory's SQLite database, in a new directory only this
    /// user can read (the ledger holds client addresses) under `$TMPDIR` (set it to a disk with
    /// room for a copy of `coffer.sqlite`): what the copy audits first is exactly what it copies,
    /// whatever the file's holder or a server still running writes to the original meanwhile.
    /// The data directory's high-water mark is read before the snapshot is taken, so a server
    /// sealing meanwhile cannot make an honest copy look rolled back. `remove()` deletes it.
    public struct Snapshot: Sendable {
        public let database: CofferDatabase
        let directory: URL
        let highWater: LedgerHighWaterFile
        let mark: LedgerHighWater?

        /// Refuses a database whose schema is not exactly this binary's (as `ledger verify` does).
        public init(dataDirectory: String, publicKey: Curve25519.Signing.PublicKey) throws {
            let path = DataDirectory(dataDirectory).database
            highWater = LedgerHighWaterFile(path: DataDirectory(dataDirectory).ledgerHighWater, key: publicKey)
            mark = try highWater.read()
            let source = try CofferDatabase(readOnlyPath: path)
            let template = FileManager.default.temporaryDirectory.appendingPathComponent("coffer-copy-XXXXXX").path
            var buffer = Array(template.utf8CString)
            guard let made = mkdtemp(&buffer) else {
                throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO, userInfo: [NSFilePathErrorKey: template])
            }
            directory = URL(fileURLWithPath: String(cString: made))
            let file = directory.appendingPathComponent("coffer.sqlite").path
            do {
                try source.backup(to: file)
                database = try CofferDatabase(currentPath: file)
            } catch {
                try? FileManager.default.removeItem(at: directory)
                throw error
            }
        }

        /// Refuses a ledger behind the data directory's high-water mark as it was before the
        /// snapshot (a backup restored over the box's newer ledger), as `serve` does: copied, it
        /// would verify and serve again what the newer one had refused.
        public func checkHighWater() async throws {
            try await highWater.check(SQLiteLedger(database), against: mark)
        }

        public func remove() {
            try? database.close()
            try? FileManager.default.removeItem(at: directory)
        }
    }

    public static func copy(from database: CofferDatabase, to backend: PostgresBackend, publicKey: Curve25519.Signing.PublicKey) async throws
        -> Summary
    {
        let ledger = SQLiteLedger(database)
        let catalogue = SQLiteCatalogue(database)
        let keys = SQLiteKeys(database)
        let adminLog = SQLiteAdminLog(database)
        var counts: [(table: String, rows: Int)] = []
        try await backend.importLedger { target in
            let products = try await catalogue.products()
            try await target.products(products)
            let assets = try await catalogue.allVersions()
            try await target.assets(assets)
            let apiKeys = try await keys.all()
            try await target.keys(apiKeys)
            let pins = try await catalogue.allPins()
            try await target.pins(pins)
            counts += [("products", products.count), ("asset versions", assets.count), ("api keys", apiKeys.count), ("content pins", pins.count)]
            counts.append(
                (
                    "redemptions",
                    try await pages {
                        try await ledger.redemptions(filter(after: $0))
                    } write: {
                        try await target.redemptions($0)
                    }
                ))
            counts.append(
                (
                    "attempts",
                    try await pages {
                        try await ledger.attempts(filter(after: $0))
                    } write: {
                        try await target.attempts($0)
                    }
                ))
            counts.append(
                (
                    "revocations",
                    try await pages {
                        try await ledger.revocations(after: $0, limit: page)
                    } write: {
                        try await target.revocations($0)
                    }
                ))
            counts.append(
                (
                    "admin actions",
                    try await pages {
                        try await adminLog.actions(after: $0, limit: page)
                    } write: {
                        try await target.adminActions($0)
                    }
                ))
            counts.append(
                (
                    "purchase events",
                    try await pages {
                        try await ledger.purchaseEvents(after: $0, limit: page)
                    } write: {
                        try await target.purchaseEvents($0)
                    }
                ))
            let deliveries = SQLiteDeliveries(database)
            counts.append(
                (
                    "deliveries",
                    try await pages {
                        try await deliveries.deliveries(redemptionId: nil, after: $0, limit: page)
                    } write: {
                        try await target.deliveries($0)
                    }
                ))
            counts.append(
                (
                    "chain events",
                    try await pages {
                        try await ledger.events(after: $0, limit: page)
                    } write: {
                        try await target.events($0)
                    }
                ))
            counts.append(
                (
                    "checkpoints",
                    try await pages {
                        try await ledger.checkpoints(after: $0, limit: page)
                    } write: {
                        try await target.checkpoints($0)
                    }
                ))
            if let seal = try await ledger.sealedHead() { try await target.seal(seal) }
        }
        let audit = try await PostgresLedger(backend).audit(publicKey: publicKey)
        return Summary(counts: counts, audit: audit)
    }

    private static func filter(after: Int64) -> AuditFilter {
        var filter = AuditFilter()
        filter.after = after
        filter.limit = page
        return filter
    }

    /// Reads pages after each last sequence until a short page; writes each; returns the rows copied.
    private static func pages<Row: SequenceNumbered>(_ read: (Int64) async throws -> [Row], write: ([Row]) async throws -> Void) async throws
        -> Int
    {
        var after: Int64 = 0
        var total = 0
        while true {
            let rows = try await read(after)
            try await write(rows)
            total += rows.count
            guard let last = rows.last, rows.count == page else { return total }
            after = last.sequence
        }
    }
}

/// A row read page by page by its sequence number.
protocol SequenceNumbered { var sequence: Int64 { get } }
extension Redemption: SequenceNumbered {}
extension RejectedAttempt: SequenceNumbered {}
extension Revocation: SequenceNumbered {}
extension AdminAction: SequenceNumbered {}
extension PurchaseEvent: SequenceNumbered {}
extension Delivery: SequenceNumbered {}
extension StoredEvent: SequenceNumbered {}
extension LedgerCheckpoint: SequenceNumbered {}
