import Logging
import NIOCore
import PostgresNIO
import Synchronization

/// A server session, named by its process id and start together: a pid alone may be reused,
/// or name another server's process after a failover.
struct ServerSession: Sendable, Hashable {
    let pid: Int32
    let start: String
}

/// What the server says of a session asked about on another connection (``SessionProbe``).
enum SessionState: Sendable {
    /// Running a statement: busy (a lock, a slow disk, synchronous standbys), not lost.
    case running
    /// Idle, or unknown to the server that answered: whatever it was sent, its answer is lost.
    case notRunning
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
struct SilenceWatch: Sendable {
    /// How long a statement may go without an answer before its session is looked at.
    let bound: Duration
    let sessions: ServerSessions
    /// Nil: silence closes the connection at once (the probe's own statements).
    let probe: SessionProbe?

    /// Silence this long closes the connection even when nobody could say what its session does.
    var limit: Duration { bound * 4 }
}

/// The server sessions of a backend's open connections, learned once per connection.
final class ServerSessions: Sendable {
    private let known = Mutex<[ObjectIdentifier: ServerSession]>([:])

    func session(of connection: PostgresConnection) -> ServerSession? { known.withLock { $0[ObjectIdentifier(connection)] } }

    /// Learns `connection`'s session, unless known: one statement on each new connection.
    /// Forgotten when the connection closes (before it is freed, so its identifier is not reused meanwhile).
    func learn(_ connection: PostgresConnection, logger: Logger) async throws {
        guard session(of: connection) == nil else { return }
        let found = try await connection.rows(
            "SELECT pid, backend_start::text FROM pg_stat_activity WHERE pid = pg_backend_pid()", logger: logger
        ) { row in ServerSession(pid: try row[0].decode(Int32.self), start: try row[1].decode(String.self)) }
        guard let session = found.first else { throw PostgresStoreError.database("the connection's server session could not be found") }
        let key = ObjectIdentifier(connection)
        known.withLock { $0[key] = session }
        connection.closeFuture.whenComplete { [self] _ in _ = known.withLock { $0.removeValue(forKey: key) } }
    }

    var count: Int { known.withLock { $0.count } }
}

/// Asks, on a connection of its own pool (one connection, opened when needed), what a session
/// is doing; its own statements are watched without a probe, and the wait for its connection
/// ends after `deadline`.
final class SessionProbe: Sendable {
    private let client: PostgresClient
    private let bound: Duration
    private let deadline: Duration
    private let logger: Logger
    private let questions = Atomic<Int>(0)
    /// Questions asked so far.
    var asked: Int { questions.load(ordering: .relaxed) }

    init(client: PostgresClient, bound: Duration, deadline: Duration, logger: Logger) {
        self.client = client
        self.bound = bound
        self.deadline = deadline
        self.logger = logger
    }

    func state(of session: ServerSession, sessions: ServerSessions) async -> SessionState {
        questions.add(1, ordering: .relaxed)
        let watch = SilenceWatch(bound: bound, sessions: sessions, probe: nil)
        let (client, deadline, logger) = (client, deadline, logger)
        do {
            let states = try await PostgresBackend.$silence.withValue(watch) {
                try await withThrowingTaskGroup(of: [String]?.self) { group in
                    group.addTask {
                        try await client.withConnection { c in
                            try await c.column(
                                """
                                SELECT coalesce(state, '?') FROM pg_stat_activity
                                WHERE pid = \(session.pid) AND backend_start = \(session.start)::timestamptz
                                """, String.self, logger: logger)
                        }
                    }
                    group.addTask {
                        try await Task.sleep(for: deadline)
                        return nil
                    }
                    defer { group.cancelAll() }
                    guard let first = try await group.next(), let states = first else { throw PostgresStoreError.timedOut(deadline) }
                    return states
                }
            }
            guard let state = states.first else { return .notRunning }
            return switch state {
            case "active": .running
            case "?": .unknown  // not ours to see (another role's session)
            default: .notRunning
            }
        } catch {
            logger.warning("could not ask the database about a silent session: \(PostgresStoreError.wrapping(error))")
            return .unknown
        }
    }
}

/// One statement's watch, from its sending until its first answer.
final class StatementWatch: Sendable {
    private struct State {
        var answered = false
        var closed = false
        var timer: Scheduled<Void>?
        var silent: Duration = .zero
    }

    private let state = Mutex(State())
    private let watch: SilenceWatch
    private let connection: PostgresConnection
    private let logger: Logger

    init(_ watch: SilenceWatch, _ connection: PostgresConnection, logger: Logger) {
        self.watch = watch
        self.connection = connection
        self.logger = logger
        arm()
    }

    /// Whether the watch closed the connection.
    var closed: Bool { state.withLock { $0.closed } }

    /// The answer came, or the statement failed: no more timers, and a timer already due does nothing.
    func answered() {
        state.withLock { state -> Scheduled<Void>? in
            state.answered = true
            return state.timer.take()
        }?.cancel()
    }

    /// A timer of the connection's loop: an insert into its heap and a cancel per statement.
    private func arm() {
        let timer = connection.eventLoop.scheduleTask(in: TimeAmount(watch.bound)) { [self] in silent() }
        let answered = state.withLock { state in
            if !state.answered { state.timer = timer }
            return state.answered
        }
        if answered { timer.cancel() }
    }

    private func silent() {
        let silence: Duration? = state.withLock { state in
            guard !state.answered else { return nil }
            state.silent += watch.bound
            return state.silent
        }
        guard let silence else { return }
        guard let probe = watch.probe, let session = watch.sessions.session(of: connection) else {
            return close(after: silence, because: "its session is not known")
        }
        let limit = watch.limit
        Task {
            switch await probe.state(of: session, sessions: watch.sessions) {
            case .running:
                logger.notice("a database statement has had no answer for \(silence); its session is still running it: waiting on")
                arm()
            case .unknown where silence < limit: arm()
            case .unknown: close(after: silence, because: "nobody could say what its session does")
            case .notRunning: close(after: silence, because: "its session is not running it (idle, or unknown to that server)")
            }
        }
    }

    private func close(after silence: Duration, because reason: String) {
        let close = state.withLock { state in
            guard !state.answered else { return false }
            state.closed = true
            return true
        }
        guard close else { return }
        logger.error("a database statement has had no answer for \(silence), and \(reason): closing its connection (a server lost without a reset?)")
        let _: EventLoopFuture<Void> = connection.close()  // the channel, at once: the statement fails
    }
}
