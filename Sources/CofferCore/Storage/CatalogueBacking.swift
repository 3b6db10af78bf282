import Foundation
import Synchronization

/// A chained admin-log entry with the hash of the chain entry before it, so that its own
/// stored hash can be checked against its values.
public struct LinkedEntry: Sendable, Hashable {
    /// Lower-case hex; the genesis hash for the chain's first entry.
    public var previousHash: String
    public var chained: ChainedEntry

    public init(previousHash: String, chained: ChainedEntry) {
        self.previousHash = previousHash
        self.chained = chained
    }

    /// Whether the stored hash is the hash of the entry as it reads now.
    public var hashMatches: Bool {
        guard let previous = Hex.decode(previousHash), previous.count == 32 else { return false }
        return Hex.encode(LedgerChain.hash(previous: previous, entry: chained.entry)) == chained.entryHash
    }
}

/// Where ``CatalogueBacking`` reads the admin log from.
public protocol CatalogueLogSource: Sendable {
    /// The chained catalogue admin actions (`product.put`, `product.delete`, `asset.upload`,
    /// `asset.forget`) whose admin-log row comes after row `afterRow`, in row order (which is
    /// chain order: a row is inserted under the chain's lock and chained in its transaction),
    /// at most `limit`. A row no ledger event chains is left out.
    func catalogueLog(afterRow: Int64, limit: Int) async throws -> [LinkedEntry]
}

/// The server's check that it serves only the catalogue the chained admin log backs: a
/// product as an admin last put it, an asset version as an admin uploaded it. A row written
/// behind the server's back (an insider with the database file, or PostgreSQL's owner role,
/// giving a cheap product the premium level's assets) is refused — the read throws
/// ``CatalogueBacking/Unbacked``, the client gets 503 — instead of being served until someone
/// puts it back before the next `coffer ledger verify`.
///
/// It keeps the admin log's catalogue entries replayed in memory (``CatalogueAudit``) and,
/// after each row it reads, reads the entries logged after the last it has: an admin's change
/// (here or on another instance) is stored with its entry in one transaction, so a read of
/// the log begun after the row's sees that entry — and an admin's later change or delete,
/// so a row put back to what an admin once made is refused too. That is one more query per
/// row read, not per request: the catalogue's cache reads a row again at most every
/// `maxAge`. Reads of the log are one at a time, shared by the rows waiting for them. An
/// entry whose stored hash does not match its values backs nothing (edited behind the
/// server's back; `coffer ledger verify` names it).
///
/// What it does not see: an admin-log entry edited, and its hash and the chain after it
/// rewritten, before this process read it — `verify` does, while the rewrite stands.
public final class CatalogueBacking: Sendable {
    /// A row the admin log does not back.
    public struct Unbacked: Error, Sendable, CustomStringConvertible {
        /// What the row says and what the log says of it.
        public var finding: CatalogueFinding
        public var description: String { "catalogue row refused: \(finding) (check with `coffer ledger verify`)" }
    }

    private struct Flight {
        var number: UInt64
        var task: Task<Void, any Error>
    }

    private struct State {
        var replay = CatalogueAudit()
        /// The last admin-log row read.
        var afterRow: Int64 = 0
        /// Follows begun, and the number of the last one finished (they run one at a time).
        var started: UInt64 = 0
        var finished: UInt64 = 0
        var flight: Flight?
        /// Rows already reported (each is logged once, not on every refused read).
        var reported: Set<CatalogueFinding> = []
    }

    private let state = Mutex(State())
    private let source: any CatalogueLogSource
    private let page: Int
    private let report: @Sendable (String) -> Void

    /// `report` is told (once each) of every row refused and every entry whose hash does not
    /// match. `page`: entries read per query.
    public init(_ source: any CatalogueLogSource, page: Int = 1000, report: @escaping @Sendable (String) -> Void = { _ in }) {
        self.source = source
        self.page = max(1, page)
        self.report = report
    }

    /// `read()`'s product if the log backs it (nil if there is none).
    public func product(_ read: () async throws -> Product?) async throws -> Product? {
        try await backed(read, { $0.backs($1) }) { replay, product in
            var audit = replay
            audit.product(id: product.productId, product)
            return audit.finish().first { $0.kind != .productRemoved && $0.kind != .assetVersionRemoved }
        }
    }

    /// `read()`'s asset version if the log backs it (nil if there is none).
    public func asset(_ read: () async throws -> Asset?) async throws -> Asset? {
        try await backed(read, { $0.backs($1) }) { replay, asset in
            var audit = replay
            audit.version(asset)
            return audit.finish().first { $0.kind != .productRemoved && $0.kind != .assetVersionRemoved }
        }
    }

    /// The rows among `products` and `assets` the log does not back (after reading what it
    /// gained), each as a finding: the start-up check.
    public func unbacked(products: [Product], assets: [Asset]) async throws -> [CatalogueFinding] {
        try await followed(since: ticket())
        let replay = state.withLock { $0.replay }
        var audit = replay
        for product in products where !replay.backs(product) { audit.product(id: product.productId, product) }
        for asset in assets where !replay.backs(asset) { audit.version(asset) }
        return audit.finish().filter { $0.kind != .productRemoved && $0.kind != .assetVersionRemoved }
    }

    /// Reads the row, then the entries the log gained since (none, mostly: one query that
    /// finds nothing); when they do not back it — it may have changed again meanwhile — the
    /// row once more.
    private func backed<Row: Sendable>(
        _ read: () async throws -> Row?, _ backs: (CatalogueAudit, Row) -> Bool, _ finding: (CatalogueAudit, Row) -> CatalogueFinding?
    ) async throws -> Row? {
        var tries = 0
        while true {
            tries += 1
            guard let row = try await read() else { return nil }
            // Taken once the row is read: the log's read that serves it begins after, and
            // sees every entry committed before the row was (with it, or earlier).
            try await followed(since: ticket())
            let replay = state.withLock { $0.replay }
            if backs(replay, row) { return row }
            guard tries >= 2 else { continue }
            guard let unbacked = finding(replay, row) else { return row }
            let refused = Unbacked(finding: unbacked)
            if state.withLock({ $0.reported.insert(unbacked).inserted }) { report(refused.description) }
            throw refused
        }
    }

    /// The number of follows begun: a follow numbered above it begins after this call.
    private func ticket() -> UInt64 { state.withLock { $0.started } }

    /// Returns once a follow begun after `ticket` was taken has finished.
    private func followed(since ticket: UInt64) async throws {
        while true {
            let flight = state.withLock { s -> Flight? in
                if s.finished > ticket { return nil }
                if let flight = s.flight { return flight }
                s.started &+= 1
                let number = s.started
                let flight = Flight(number: number, task: Task { try await self.follow(number) })
                s.flight = flight
                return flight
            }
            guard let flight else { return }
            try await flight.task.value
            if flight.number > ticket { return }
        }
    }

    /// Reads and replays the entries after the last row read; ends the flight.
    private func follow(_ number: UInt64) async throws {
        do {
            var after = state.withLock { $0.afterRow }
            var replay = state.withLock { $0.replay }
            var mismatched: [Int64] = []
            while true {
                let entries = try await source.catalogueLog(afterRow: after, limit: page)
                for linked in entries {
                    if linked.hashMatches { replay.add(linked.chained.entry) } else { mismatched.append(linked.chained.entry.sequence) }
                }
                guard let last = entries.last, entries.count == page else {
                    after = entries.last?.chained.entry.row ?? after
                    break
                }
                after = last.chained.entry.row
            }
            state.withLock { s in
                s.replay = replay
                s.afterRow = after
                s.finished = number
                s.flight = nil
            }
            for sequence in mismatched {
                report("admin log entry \(sequence) does not match its stored hash: it backs no catalogue row (check with `coffer ledger verify`)")
            }
        } catch {
            // Its readers get the error; the next read begins a follow of its own.
            state.withLock { $0.flight = nil }
            throw error
        }
    }
}
