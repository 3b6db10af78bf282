import Logging
import NIOCore
import PostgresNIO
import Synchronization

/// A server session, named by its process id and start together: a pid alone may be reused,
/// or name another server's process after a failover.
struct ServerSession: Sendable, Hashable {
    let pid: Int32
    /// `backend_start` in microseconds since 1970, computed by the server (no text round trip
    /// through two sessions' DateStyle and TimeZone).
    let start: Int64
    /// The server's own start (`pg_postmaster_start_time()`, microseconds since 1970): which
    /// server the session is on. A standby promoted in a failover started at another time.
    let server: Int64
}

/// What the server says of a session asked about on another connection (``SessionProbe``).
enum SessionState: Sendable, Hashable {
    /// Running a statement: busy (a lock, a slow disk, synchronous standbys), not lost.
    case running
    /// Idle, or waiting on its client: whatever it was sent, its answer is lost — unless that
    /// answer is still on its way (so this closes only after the watch's bound).
    case notRunning
    /// Unknown to the server that answered, whose own start is `server`: the session ended, or
    /// is on another server (a failover). Nothing can still answer it.
    case gone(server: Int64)
    /// No answer to the question either.
    case unknown
}

/// How a backend's calls watch their statements for silence (``PostgresBackend/silence``):
/// a statement without an answer for ``bound`` has its session looked at on another connection
/// (``SessionProbe``); one the server no longer runs, or that nobody could ask about for
/// ``limit``, has its connection closed, which fails it (a storage failure, 503).
///
/// Why: once the server has acknowledged a statement's bytes the client's kernel has nothing
/// to retransmit and no keep-alive (postgres-nio sets none), so a server lost without a reset
/// — a failover to another host, a partition — held the statement's caller forever; the
/// ledger writer's, every redemption of the instance. Why ask rather than close at once: a
/// server that is alive but slow (a COMMIT waiting for synchronous standbys, which no timer
/// ends by design; a disk stalled in a WAL flush) would see a batch it then commits answered
/// 503, and every retry 409.
///
/// The first question is asked after ``first`` (2 s at most): a session the server that
/// answers does not know is closed then — and when that server is another one, every
/// connection of the server it replaced is closed with it (``ServerSessions/onServer(_:)``),
/// so a failover costs each instance one wait of 2 s, not one of ``bound`` per pooled
/// connection. A session the server shows idle is closed only after ``bound``: its answer may
/// still be on its way.
struct SilenceWatch: Sendable {
    /// How long a statement may go without an answer, its session not running it, before its
    /// connection is closed.
    let bound: Duration
    let sessions: ServerSessions
    /// Nil: silence closes the connection at once (the probe's own statements). Otherwise a
    /// connection whose session is not known is closed after ``limit``.
    let probe: SessionProbe?
    /// What the watches did, for tests and logs.
    let counts: SilenceCounts

    /// Silence this long closes the connection even when nobody could say what its session does.
    var limit: Duration { bound * 4 }
    /// When a silent statement's session is first looked at.
    var first: Duration { min(bound, .seconds(2)) }
}

/// Counts of a backend's silence watches.
final class SilenceCounts: Sendable {
    private let questions = Atomic<Int>(0)
    private let closes = Atomic<Int>(0)
    private let replacements = Atomic<Int>(0)
    /// Questions asked about silent sessions.
    var asked: Int { questions.load(ordering: .relaxed) }
    /// Connections closed for their silence.
    var closed: Int { closes.load(ordering: .relaxed) }
    /// Other connections closed because their server was found replaced.
    var replaced: Int { replacements.load(ordering: .relaxed) }
    func ask() { questions.add(1, ordering: .relaxed) }
    func close() { closes.add(1, ordering: .relaxed) }
    func replace() { replacements.add(1, ordering: .relaxed) }
}

/// The server sessions of a backend's open connections, learned once per connection, and the
/// statement each is waiting for.
final class ServerSessions: Sendable {
    private struct Entry {
        let connection: PostgresConnection
        /// Nil when the server did not show it, or the question failed.
        var session: ServerSession?
        /// The statement the connection waits for an answer to, if any (one at a time).
        var statement: StatementWatch?
        /// When a session not learned is asked about again.
        var retry: ContinuousClock.Instant?
    }

    /// By connection, while it is open.
    private let known = Mutex<[ObjectIdentifier: Entry]>([:])
    /// When a server was last found replaced (``StatementWatch``'s failover).
    private let replacement = Mutex<ContinuousClock.Instant?>(nil)

    /// A server was found replaced: connections made before and never learned are the old one's.
    func replaced() { replacement.withLock { $0 = .now } }

    /// Whether a server was found replaced within `window`.
    func replaced(within window: Duration) -> Bool {
        replacement.withLock { $0.map { ContinuousClock.now - $0 < window } ?? false }
    }

    func session(of connection: PostgresConnection) -> ServerSession? { known.withLock { $0[ObjectIdentifier(connection)]?.session } }

    /// `statement` waits on `connection`.
    func waiting(_ statement: StatementWatch, on connection: PostgresConnection) {
        known.withLock { $0[ObjectIdentifier(connection)]?.statement = statement }
    }

    /// `statement` no longer waits on `connection` (a later one's wait stays).
    func done(_ statement: StatementWatch, on connection: PostgresConnection) {
        known.withLock { known in
            let key = ObjectIdentifier(connection)
            if known[key]?.statement === statement { known[key]?.statement = nil }
        }
    }

    /// On the loop, every ``SilenceWatch/first``: the statements whose rows have been coming
    /// that long are looked at (``StatementWatch/sweep()``) — one pass over the open
    /// connections, rather than a timer per statement left pending after its last row.
    func sweep() {
        for statement in known.withLock({ $0.values.compactMap(\.statement) }) { statement.sweep() }
    }

    /// The open connections whose sessions are on `server`, with the statement each waits for.
    func onServer(_ server: Int64) -> [(connection: PostgresConnection, statement: StatementWatch?)] {
        known.withLock { known in known.values.filter { $0.session?.server == server }.map { ($0.connection, $0.statement) } }
    }

    /// Learns `connection`'s session, unless known: one statement on each new connection.
    /// Forgotten when the connection closes (before it is freed, so its identifier is not
    /// reused meanwhile). A server that does not show it (a look-alike of PostgreSQL, a proxy),
    /// or a question that failed, leaves it unknown, logged, and the request goes on — asked
    /// again on a lease a minute later: meanwhile a silence of that connection is closed
    /// after ``SilenceWatch/limit``, nobody to ask.
    func learn(_ connection: PostgresConnection, logger: Logger) async throws {
        let key = ObjectIdentifier(connection)
        let now = ContinuousClock.now
        let (due, isNew) = known.withLock { known -> (Bool, Bool) in
            guard let entry = known[key] else { return (true, true) }
            return (entry.session == nil && entry.retry.map { $0 <= now } == true, false)
        }
        guard due else { return }
        let found: [ServerSession]
        do {
            found = try await connection.rows(
                """
                SELECT pid, (extract(epoch FROM backend_start) * 1000000)::bigint, (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint
                FROM pg_stat_activity WHERE pid = pg_backend_pid() AND backend_start IS NOT NULL
                """, logger: logger
            ) { row in
                ServerSession(pid: try row[0].decode(Int32.self), start: try row[1].decode(Int64.self), server: try row[2].decode(Int64.self))
            }
        } catch let error as PostgresStoreError where error.isSessionLost {
            throw error  // its connection is closed: the body would fail on it too
        } catch {
            // Refused (EXECUTE revoked, a look-alike without these functions): not known, and
            // the request goes on.
            logger.notice("could not learn this connection's server session: \(PostgresStoreError.wrapping(error))")
            found = []
        }
        if found.isEmpty {
            logger.notice(
                "the database does not show this connection's session in pg_stat_activity: its statements cannot be asked about when silent")
        }
        let retry = found.isEmpty ? ContinuousClock.now + .seconds(60) : nil
        known.withLock { known in
            if known[key] == nil {
                known[key] = Entry(connection: connection, session: found.first, retry: retry)
            } else {
                known[key]?.session = found.first
                known[key]?.retry = retry
            }
        }
        if isNew { connection.closeFuture.whenComplete { [self] _ in _ = known.withLock { $0.removeValue(forKey: key) } } }
    }
}

/// Asks, on a connection of its own pool (one at a time, made for each question and closed
/// after it), what a session is doing; its own statements are watched without a probe, and
/// the wait for its connection ends after `deadline`.
final class SessionProbe: Sendable {
    private let client: PostgresClient
    private let deadline: Duration
    private let logger: Logger

    init(client: PostgresClient, deadline: Duration, logger: Logger) {
        self.client = client
        self.deadline = deadline
        self.logger = logger
    }

    /// What the server says `session` does — within about `deadline`: the wait for the
    /// probe's connection ends then, and so does the silence of its own statement (a
    /// connection of a lost server too).
    func state(of session: ServerSession, sessions: ServerSessions, counts: SilenceCounts) async -> SessionState {
        counts.ask()
        let watch = SilenceWatch(bound: deadline, sessions: sessions, probe: nil, counts: counts)
        let (client, deadline, logger) = (client, deadline, logger)
        do {
            let answers = try await PostgresBackend.$silence.withValue(watch) {
                try await withThrowingTaskGroup(of: [(Int64, Bool, String?)]?.self) { group in
                    group.addTask {
                        try await client.withConnection { c in
                            // Asked on a connection made for the question, then closed — before
                            // the lease goes back, so the pool never hands it on: one kept from
                            // before a failover could be one of the old server's, frozen, or
                            // still answering for an old primary nobody fenced off.
                            let answers: [(Int64, Bool, String?)]
                            do {
                                answers = try await Self.ask(c, session, logger: logger)
                            } catch {
                                try? await c.close()
                                throw error
                            }
                            try? await c.close()
                            return answers
                        }
                    }

                    group.addTask {
                        try await Task.sleep(for: deadline)
                        return nil
                    }
                    defer { group.cancelAll() }
                    guard let first = try await group.next(), let answers = first else { throw PostgresStoreError.timedOut(deadline) }
                    return answers
                }
            }
            // A standby knows nothing of the primary's sessions: no answer about them.
            guard let (server, recovering, answer) = answers.first, !recovering else { return .unknown }
            guard let answer else { return .gone(server: server) }
            return Self.state(answer)
        } catch {
            logger.warning("could not ask the database about a silent session: \(PostgresStoreError.wrapping(error))")
            return .unknown
        }
    }

    /// The server's start, whether it is a standby, and `session`'s `state/wait_event` (nil:
    /// not a session of that server).
    private static func ask(_ c: PostgresConnection, _ session: ServerSession, logger: Logger) async throws -> [(Int64, Bool, String?)] {
        try await c.rows(
            """
            SELECT (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint, pg_is_in_recovery(),
              (SELECT coalesce(state, '?') || '/' || coalesce(wait_event, '') FROM pg_stat_activity
               WHERE pid = \(session.pid) AND (extract(epoch FROM backend_start) * 1000000)::bigint = \(session.start))
            """, logger: logger
        ) { row in (try row[0].decode(Int64.self), try row[1].decode(Bool.self), try row[2].decode(String?.self)) }
    }

    /// A session's `state/wait_event` as ``state(of:sessions:counts:)`` reads it.
    static func state(_ answer: String) -> SessionState {
        let (state, wait) = answer.firstIndex(of: "/").map { (answer[..<$0], answer[answer.index(after: $0)...]) } ?? (answer[...], "")
        switch state {
        case "active", "fastpath function call":
            // Sending to the client, or waiting for it, mid-statement: its flow is what stalled.
            return wait == "ClientWrite" || wait == "ClientRead" ? .notRunning : .running
        // Not ours to see (another role's session), or not tracked (track_activities off).
        case "?", "disabled": return .unknown
        default: return .notRunning  // idle, idle in transaction (aborted)
        }
    }
}

/// One statement's watch, from its sending until its first answer — or, streaming, until its
/// last row (``firstAnswer()``, then ``answered()`` after the last row). While its rows come, only a session gone from
/// the server closes the connection: a consumer that reads slowly (a starved task, a client
/// of an export) leaves the session idle or waiting on its client, alive. The first answer
/// ends the statement's timer; rows still coming after ``SilenceWatch/first`` are found by
/// the backend's sweep (``ServerSessions/sweep()``), which arms one for them.
final class StatementWatch: Sendable {
    private struct State {
        var answered = false
        /// When the first answer came, for a statement whose rows are read after it.
        var streaming: ContinuousClock.Instant?
        var closed = false
        var timer: Scheduled<Void>?
    }

    private let state = Mutex(State())
    private let watch: SilenceWatch
    private let connection: PostgresConnection
    private let logger: Logger
    private let sent = ContinuousClock.now

    /// On the connection's event loop, where ``answered()`` runs too.
    init(_ watch: SilenceWatch, _ connection: PostgresConnection, logger: Logger) {
        self.watch = watch
        self.connection = connection
        self.logger = logger
        watch.sessions.waiting(self, on: connection)
        // The probe's own question has the probe's whole deadline.
        arm(in: watch.probe == nil ? watch.bound : watch.first)
    }

    /// Whether the watch closed the connection.
    var closed: Bool { state.withLock { $0.closed } }

    /// The answer came — streaming, the last row was read — or the statement failed: no more
    /// timers, and a timer already due does nothing. Any thread (on the loop, the cancel is a
    /// removal from its timer heap; off it, only rows that were slow to come have a timer).
    func answered() {
        watch.sessions.done(self, on: connection)
        state.withLock { state -> Scheduled<Void>? in
            state.answered = true
            return state.timer.take()
        }?.cancel()
    }

    /// On the loop: the first answer came and its rows are on their way; the watch goes on,
    /// its timer ended (the sweep arms one if the rows are slow to come).
    func firstAnswer() {
        state.withLock { state -> Scheduled<Void>? in
            state.streaming = .now
            return state.timer.take()
        }?.cancel()
    }

    /// On the loop (``ServerSessions/sweep()``): rows coming for ``SilenceWatch/first`` and no
    /// timer yet get one, due now.
    func sweep() {
        let due = state.withLock { state in
            guard !state.answered, state.timer == nil, let since = state.streaming else { return false }
            return ContinuousClock.now - since >= watch.first
        }
        if due { arm(in: .zero) }
    }

    /// A timer of the connection's loop: an insert into its heap and a cancel per statement.
    private func arm(in delay: Duration) {
        let timer = connection.eventLoop.scheduleTask(in: TimeAmount(delay)) { [self] in silent() }
        let answered = state.withLock { state in
            if !state.answered { state.timer = timer }
            return state.answered
        }
        if answered { timer.cancel() }
    }

    /// On the loop (the timer).
    private func silent() {
        let (answered, streaming) = state.withLock { ($0.answered, $0.streaming != nil) }
        guard !answered else { return }
        // The probe's own statement: nothing else to ask.
        guard let probe = watch.probe else { _ = close(because: "it was a question about another statement's session"); return }
        guard let session = watch.sessions.session(of: connection) else {
            // Not learned yet (the statement that learns it, on a busy server) or not shown by
            // the server: nobody can be asked, so it has the time of one nobody could say
            // about — but just after a failover, a connection made before it and never used
            // (so never learned) is the old server's: a silent statement on one is closed after
            // the bound. Rows already coming have the limit.
            let silence = ContinuousClock.now - sent
            let cap = !streaming && watch.sessions.replaced(within: watch.limit) ? watch.bound : watch.limit
            guard silence >= cap else { return arm(in: min(watch.bound, cap - silence)) }
            close(because: "its session is not known")
            return
        }
        let (first, bound, limit, sessions, counts) = (watch.first, watch.bound, watch.limit, watch.sessions, watch.counts)
        Task {
            let answer = await probe.state(of: session, sessions: sessions, counts: counts)
            connection.eventLoop.execute { [self] in
                let silence = ContinuousClock.now - sent
                if case .gone(let server) = answer {
                    // Answered meanwhile: its server is alive after all, and nothing is closed.
                    guard server != session.server else {
                        close(because: "its session has ended on the server (its end never reached this side)")
                        return
                    }
                    guard close(because: "its session is unknown to the server that answers now, another one (a failover)") else { return }
                    return closeAll(on: session.server)
                }
                // Read now: the first answer may have come while the question was out. Rows
                // coming: only a session gone (above), or nobody able to say for the limit, closes.
                if state.withLock({ $0.streaming != nil }) {
                    if answer == .unknown && silence >= limit {
                        close(because: "nobody could say what its session does")
                    } else if !state.withLock({ $0.answered }) {
                        arm(in: answer == .unknown ? first : bound)
                    }
                    return
                }
                switch answer {
                case .running:
                    if !state.withLock({ $0.answered }) {
                        if silence >= bound {
                            logger.notice(
                                "a database statement has had no answer for \(silence.components.seconds) s; its session is still running it: waiting on"
                            )
                        }
                        arm(in: bound)
                    }
                // Soon again: the question itself failed (no connection, the probe's deadline).
                case .unknown where silence < limit: arm(in: first)
                case .unknown: close(because: "nobody could say what its session does")
                // Its answer may still be on its way, this soon.
                case .notRunning where silence < bound: arm(in: bound - silence)
                case .notRunning: close(because: "its session is not running it (idle, or waiting on a stalled client)")
                case .gone: break  // above
                }
            }
        }
    }

    /// On the loop: every other open connection to `server`, a server found replaced, is
    /// closed — a statement waiting on one fails as lost, as this one did; an idle one leaves
    /// its pool. Each would otherwise cost its next caller a silence of ``SilenceWatch/first``.
    private func closeAll(on server: Int64) {
        watch.sessions.replaced()
        let stale = watch.sessions.onServer(server).filter { $0.connection !== connection }
        guard !stale.isEmpty else { return }
        logger.error("closing \(stale.count) more database connection(s) to the server that was replaced")
        for (other, statement) in stale {
            // The loop is the backend's one loop (every pool's); a check, not a hop.
            guard other.eventLoop.inEventLoop else {
                other.eventLoop.execute { [counts = watch.counts] in Self.close(other, statement, counts) }
                continue
            }
            Self.close(other, statement, watch.counts)
        }
    }

    /// A connection to a replaced server: closed, failing the statement it waits for as lost —
    /// one answered meanwhile came from that server after all, and is left alone.
    private static func close(_ connection: PostgresConnection, _ statement: StatementWatch?, _ counts: SilenceCounts) {
        if let statement, !statement.markClosed() { return }
        counts.replace()
        connection.closeNow()
    }

    /// On the loop: the decision and the close before any answer can end the statement, and
    /// so before its connection can go back to its pool and to another caller.
    /// Returns whether it closed (not when the answer came first).
    @discardableResult
    private func close(because reason: String) -> Bool {
        guard markClosed() else { return false }
        watch.counts.close()
        logger.error(
            "a database statement has had no answer for \((ContinuousClock.now - sent).components.seconds) s, and \(reason): closing its connection (a server lost without a reset?)"
        )
        connection.closeNow()
        return true
    }

    /// On the loop: marks the statement failed by its connection's close, unless it was
    /// answered; returns whether it was marked (the caller then closes the connection).
    fileprivate func markClosed() -> Bool {
        state.withLock { state in
            guard !state.answered else { return false }
            state.closed = true
            return true
        }
    }
}

extension PostgresConnection {
    /// Closes the channel at once: a statement waiting on it fails.
    fileprivate func closeNow() {
        let _: EventLoopFuture<Void> = close()
    }
}
