import Crypto
import Foundation
import Synchronization

/// Where ``CatalogueBacking`` reads the admin log from: the chain itself.
public protocol CatalogueLogSource: LedgerAuditRepository {
    /// The chain positions of the admin-log events after position `after`, in chain order, at
    /// most `limit`.
    func adminEvents(after: Int64, limit: Int) async throws -> [Int64]
    /// The admin-log rows (their `sequence`) after row `after`, in order, at most `limit`.
    func adminRows(after: Int64, limit: Int) async throws -> [Int64]
    /// How many chain events there are at positions after `after`, up to `through`.
    func eventCount(after: Int64, through: Int64) async throws -> Int64
}

/// The server's check that it serves only the catalogue the chained admin log backs: a
/// product as an admin last put it, an asset's latest version as an admin uploaded it. A row
/// written behind the server's back (an insider with the database file, or PostgreSQL's owner
/// role, giving a cheap product the premium level's assets) is refused — the read throws
/// ``CatalogueBacking/Unbacked``, the client gets 503 — instead of being served until someone
/// puts it back before the next `coffer ledger verify`.
///
/// It keeps the admin log's catalogue entries replayed in memory (``CatalogueAudit``) in chain
/// order, as `verify` replays them, and after each row it reads, reads the admin-log events
/// chained after the last it has: an admin's change (here or on another instance) is stored
/// with its entry in one transaction, so a read of the log begun after the row's sees that
/// entry — and an admin's later change or delete, so a row put back to what an admin once made
/// is refused too. That is one more query per row read (an indexed one that mostly finds
/// nothing), not per request: the catalogue's cache reads a row again at most every `maxAge`.
/// Reads of the log are one at a time, shared by the rows waiting for them.
///
/// Each entry it replays is first shown to be the one the ledger key signed
/// (``SignedWindow``): an entry edited, inserted, re-pointed or given a recomputed hash behind
/// the server's back does not hash to the next checkpoint's signature. Then no more rows are
/// read (``CatalogueBacking/LogBroken``) until a restart, which refuses to start while the log
/// does not verify: a skipped entry would bring back an older catalogue.
///
/// An admin's change hidden from this process is caught too: each admin-log row must be
/// chained by an admin event read, and the chain's positions are counted up to the seal (see
/// ``follow(_:)``). What it does not see: a change whose event is re-pointed at another kind
/// with a matching row of that kind, and whose admin-log row is deleted, before it reads it —
/// only hashing every entry (`verify`) sees that.
public final class CatalogueBacking: Sendable {
    /// A row the admin log does not back.
    public struct Unbacked: StorageFailure, Sendable, CustomStringConvertible {
        /// What the row says and what the log says of it.
        public var finding: CatalogueFinding
        public var description: String { "catalogue row refused: \(finding) (check with `coffer ledger verify`)" }
    }

    /// The admin log does not verify: no catalogue row is served.
    public struct LogBroken: StorageFailure, Sendable, Hashable, CustomStringConvertible {
        public var failure: SignedWindow.Failure
        public var description: String {
            "the admin log does not verify at \(failure): no catalogue row is served (check with `coffer ledger verify`)"
        }
    }

    /// The log's read did not end within the deadline (a database that stopped answering —
    /// a commit waiting for a synchronous standby that is gone): the row is not served (503);
    /// the read goes on, and the rows waiting for it are served once it ends.
    public struct TimedOut: StorageFailure, Sendable, CustomStringConvertible {
        public var deadline: Duration
        public var description: String { "the admin log was not read within \(deadline): no catalogue row is served until it is" }
    }

    private struct Flight {
        var number: UInt64
        var task: Task<Void, any Error>
    }

    private struct State {
        var replay = CatalogueAudit()
        /// The chain position of the last admin-log event read.
        var after: Int64 = 0
        /// The last admin-log row read, and every row the events read chain.
        var afterRow: Int64 = 0
        var chainedRows: Set<Int64> = []
        /// The chain position up to which no event is missing (counted up to the seal).
        var counted: Int64 = 0
        /// Follows begun, and the number of the last one finished (they run one at a time).
        var started: UInt64 = 0
        var finished: UInt64 = 0
        var flight: Flight?
        var broken: LogBroken?
        /// Rows already reported (each is logged once, not on every refused read).
        var reported: Set<CatalogueFinding> = []
    }

    private let state = Mutex(State())
    private let source: any CatalogueLogSource
    private let publicKey: Curve25519.Signing.PublicKey
    private let page: Int
    private let deadline: Duration
    private let report: @Sendable (String) -> Void

    /// `publicKey`: the ledger key's. `report` is told (once each) of every row refused and of a
    /// log that does not verify. `page`: events read per query. `deadline`: how long a row
    /// waits for the log's read before it is refused (``TimedOut``).
    public init(
        _ source: any CatalogueLogSource, publicKey: Curve25519.Signing.PublicKey, page: Int = 1000, deadline: Duration = .seconds(15),
        report: @escaping @Sendable (String) -> Void = { _ in }
    ) {
        self.source = source
        self.publicKey = publicKey
        self.page = max(1, page)
        self.deadline = deadline
        self.report = report
    }

    /// `read()`'s product if the log backs it (nil if there is none).
    public func product(_ read: () async throws -> Product?) async throws -> Product? {
        try await backed(read) { $0.refusal($1) }
    }

    /// `read()`'s asset version if the log backs it as the asset's latest (nil if there is none).
    public func asset(_ read: () async throws -> Asset?) async throws -> Asset? {
        try await backed(read) { $0.refusal($1) }
    }

    /// The rows among `products` and `assets` (each asset's latest version) the log does not
    /// back, after reading what it gained: the start-up check. Throws ``LogBroken`` when the
    /// log does not verify.
    public func unbacked(products: [Product], assets: [Asset]) async throws -> [CatalogueFinding] {
        // No deadline: the first read replays the whole log, which may take a while on a long one.
        try await followed(since: ticket(), bounded: false)
        let replay = try current()
        return products.compactMap(replay.refusal) + assets.compactMap(replay.refusal)
    }

    /// Reads the row, then the entries the log gained since (none, mostly); when they do not
    /// back it — it may have changed again meanwhile — the row once more.
    private func backed<Row: Sendable>(_ read: () async throws -> Row?, _ refusal: (CatalogueAudit, Row) -> CatalogueFinding?) async throws -> Row? {
        var tries = 0
        while true {
            tries += 1
            guard let row = try await read() else { return nil }
            // Taken once the row is read: the log's read that serves it begins after, and
            // sees every entry committed before the row was (with it, or earlier).
            try await followed(since: ticket())
            guard let finding = refusal(try current(), row) else { return row }
            guard tries >= 2 else { continue }
            let refused = Unbacked(finding: finding)
            if state.withLock({ $0.reported.insert(refused.finding).inserted }) { report(refused.description) }
            throw refused
        }
    }

    /// The replay, unless the log was found not to verify.
    private func current() throws -> CatalogueAudit {
        let (replay, broken) = state.withLock { ($0.replay, $0.broken) }
        if let broken { throw broken }
        return replay
    }

    /// Marks the log as not verifying (for good: an entry skipped would bring an older
    /// catalogue back), reports it, ends the flight.
    private func stop(_ failure: SignedWindow.Failure) -> LogBroken {
        let broken = LogBroken(failure: failure)
        state.withLock { s in
            s.broken = broken
            s.flight = nil
        }
        report(broken.description)
        return broken
    }

    /// The number of follows begun: a follow numbered above it begins after this call.
    private func ticket() -> UInt64 { state.withLock { $0.started } }

    /// Returns once a follow begun after `ticket` was taken has finished (``TimedOut`` after
    /// the deadline, when `bounded`).
    private func followed(since ticket: UInt64, bounded: Bool = true) async throws {
        while true {
            let flight = state.withLock { s -> Flight? in
                if s.finished > ticket || s.broken != nil { return nil }
                if let flight = s.flight { return flight }
                s.started &+= 1
                let number = s.started
                let flight = Flight(number: number, task: Task { try await self.follow(number) })
                s.flight = flight
                return flight
            }
            guard let flight else { return }
            if bounded { try await finished(flight) } else { try await flight.task.value }
            if flight.number > ticket { return }
        }
    }

    /// Returns when `flight` ends, or throws ``TimedOut`` at the deadline (the flight goes on:
    /// one read of the log at a time, however long the database takes).
    ///
    /// Not a task group: a group waits for all its children, and a child awaiting the flight's
    /// `value` cannot be cancelled — the deadline would wait for the hung read it is there to cut.
    private func finished(_ flight: Flight) async throws {
        let deadline = deadline
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let answer = Answer(continuation)
            let timer = Task {
                try await Task.sleep(for: deadline)
                answer.resume(with: .failure(TimedOut(deadline: deadline)))
            }
            Task {
                let result = await flight.task.result
                timer.cancel()
                answer.resume(with: result)
            }
        }
    }

    /// A continuation resumed once, by whichever comes first.
    private final class Answer: Sendable {
        private let continuation: Mutex<CheckedContinuation<Void, any Error>?>
        init(_ continuation: CheckedContinuation<Void, any Error>) { self.continuation = Mutex(continuation) }
        func resume(with result: Result<Void, any Error>) { continuation.withLock { $0.take() }?.resume(with: result) }
    }

    /// Reads, checks and replays the admin-log events after the last one read; ends the flight.
    ///
    /// Besides each event's signed window: the admin-log rows are read first (a row is stored
    /// with its event, so the events read after include its own) and each must be chained by an
    /// admin event read — an event re-pointed at another kind to hide an admin's change from
    /// this process is caught so; and the chain's positions up to the seal are counted — an
    /// event deleted to hide one leaves a gap.
    private func follow(_ number: UInt64) async throws {
        do {
            var (after, afterRow, chainedRows, counted, replay) = state.withLock { ($0.after, $0.afterRow, $0.chainedRows, $0.counted, $0.replay) }
            var rows: [Int64] = []
            while true {
                let read = try await source.adminRows(after: rows.last ?? afterRow, limit: page)
                rows += read
                if read.count < page { break }
            }
            let seal = try await source.sealedHead()
            while true {
                let events = try await source.adminEvents(after: after, limit: page)
                guard let last = events.last else { break }
                let entries: [LedgerEntry]
                do { entries = try await SignedWindow.entries(at: events, in: source, publicKey: publicKey) } catch let failure
                    as SignedWindow.Failure
                { throw stop(failure) }
                for entry in entries {
                    replay.add(entry)
                    chainedRows.insert(entry.row)
                }
                after = last
                if events.count < page { break }
            }
            if let row = rows.first(where: { !chainedRows.contains($0) }) {
                throw stop(
                    SignedWindow.Failure(
                        sequence: after, reason: "admin-log row \(row) is chained by no admin-log event (its event was re-pointed or deleted)"))
            }
            if let seal, seal.sequence > counted {
                let present = try await source.eventCount(after: counted, through: seal.sequence)
                guard present == seal.sequence - counted else {
                    throw stop(
                        SignedWindow.Failure(
                            sequence: counted + 1,
                            reason:
                                "\(seal.sequence - counted - present) of the chain's entries \(counted + 1)–\(seal.sequence) are missing (deleted)"))
                }
                counted = seal.sequence
            }
            state.withLock { s in
                s.replay = replay
                s.after = after
                s.afterRow = rows.last ?? afterRow
                s.chainedRows = chainedRows
                s.counted = counted
                s.finished = number
                s.flight = nil
            }
        } catch let broken as LogBroken {
            throw broken
        } catch {
            // Its readers get the error; the next read begins a follow of its own.
            state.withLock { $0.flight = nil }
            throw error
        }
    }
}
