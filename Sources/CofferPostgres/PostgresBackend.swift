import CofferCore
import Foundation
import Logging
import NIOCore
import NIOPosix
import PostgresNIO
import Synchronization

/// The connection pool to one PostgreSQL database, shared by every repository of this module,
/// and the ledger writer's own connection (``chainTurn(_:)``). It runs both
/// (``PostgresClient/run()``) from ``open(_:poolSize:logger:)`` until ``close()``,
/// applies the embedded migrations, and runs transactions whose failures are storage failures
/// (503 `storageUnavailable`), never bare errors of the driver.
public final class PostgresBackend: Sendable {
    let client: PostgresClient
    /// One connection, the ledger writer's alone, kept open (reopened only when lost): its
    /// turns run on one server session, which plans the chain's procedures at its first batch
    /// and keeps the plans. From the shared pool a turn could land on a session that had only
    /// served reads and plan `coffer_take_chain` and `coffer_append_commit` there, holding the
    /// chain's lock (5–10 ms, under which both instances' redemptions waited), and a catalogue
    /// read could take the writer's session.
    private let writer: PostgresClient
    /// The backend's own event loop thread: the connections' I/O and the ledger writer's task
    /// (``executor``) run on it, not on the threads that verify receipts and serve HTTP.
    private let group: MultiThreadedEventLoopGroup
    /// ``group``'s one loop: the connections', the ledger writer's, and the lease deadlines' timers.
    private let loop: any EventLoop
    /// Runs a task's jobs on ``loop``'s thread (for the ledger writer, see ``PostgresLedgerWriter``).
    let executor: EventLoopTaskExecutor
    let logger: Logger
    public let url: PostgresURL
    /// How long one read or transaction may take, waiting for a connection included: a
    /// database that is down or stuck answers 503 within this time, never holds a request.
    let deadline: Duration?
    /// The servers' `statement_timeout`: a statement that takes this long is a stuck database.
    public static let statementTimeout: Duration = .seconds(15)
    /// The `statement_timeout` the sessions ask for (nil: tools, no timeouts).
    private let askedTimeout: Duration?
    /// The writer's session last checked (``checkSession(_:)``).
    private let checkedSession = Mutex<PostgresConnection.ID?>(nil)
    /// Chain turns begun: the keep-alive (``keepAlive(_:turns:every:logger:)``) pings only a
    /// writer session that had none in its last interval.
    private let turns: TurnCount
    private let running: Task<Void, Never>
    /// How long ``close()`` waits for the pools' tasks before it closes their connections anyway.
    static let closeWait: Duration = .seconds(10)
    /// With `timeouts`: how this backend's calls watch their statements (``SilenceWatch``):
    /// a statement's session is looked at after 2 s without an answer, and one its server
    /// shows idle is closed after the sessions' `statement_timeout` and 10 s (the server answers
    /// a statement it ended at its timeout, or a lock wait it ended, well within that).
    let watch: SilenceWatch?
    /// The repeated pass of ``ServerSessions/sweep()`` (with ``watch``).
    private let sweeper: RepeatedTask?
    /// The sessions of this backend's connections, for ``watch``.
    private let sessions: ServerSessions
    /// The probe's own pool (one connection, when needed).
    private let probes: PostgresClient
    /// The watch of the backend call this task runs in (nil: none, tools).
    @TaskLocal static var silence: SilenceWatch?

    /// `started` gets one element from each pool's task just before it calls `run()`.
    /// `keepAlive`: how often the writer's session is pinged when idle (nil: never).
    private init(
        client: PostgresClient, writer: PostgresClient, probes: PostgresClient, group: MultiThreadedEventLoopGroup, url: PostgresURL,
        deadline: Duration?, askedTimeout: Duration?, silence: Duration?, keepAlive: Duration?, logger: Logger,
        started: AsyncStream<Void>.Continuation
    ) {
        self.client = client
        self.writer = writer
        self.group = group
        let loop = group.next()
        self.loop = loop
        self.executor = EventLoopTaskExecutor(loop)
        self.url = url
        self.deadline = deadline
        self.askedTimeout = askedTimeout
        let sessions = ServerSessions()
        self.sessions = sessions
        self.probes = probes
        let watch = silence.map { bound in
            SilenceWatch(
                bound: bound, sessions: sessions, probe: SessionProbe(client: probes, deadline: deadline ?? .seconds(10), logger: logger),
                counts: SilenceCounts())
        }
        self.watch = watch
        // Rows slow to come (``StatementWatch/sweep()``): one pass over the connections, on their loop.
        self.sweeper = watch.map { watch in
            loop.scheduleRepeatedTask(initialDelay: TimeAmount(watch.first), delay: TimeAmount(watch.first)) { _ in sessions.sweep() }
        }
        self.logger = logger
        let turns = TurnCount()
        self.turns = turns
        self.running = Task {
            await withDiscardingTaskGroup { pools in
                if let keepAlive {
                    pools.addTask {
                        await Self.$silence.withValue(watch) { await Self.keepAlive(writer, turns: turns, every: keepAlive, logger: logger) }
                    }
                }
                // `run()` marks the client running before its first suspension point.
                pools.addTask {
                    started.yield()
                    await client.run()
                }
                pools.addTask {
                    started.yield()
                    await writer.run()
                }
                pools.addTask { await probes.run() }
            }
        }
    }

    /// Connects (at most `poolSize` connections: the ledger writer's own one and `poolSize` − 1
    /// shared by everything else, with 2 at least) and checks the server answers.
    /// `timeouts` false: no statement or lock timeout (tools reading a whole ledger).
    /// `idle`: how long a shared connection may sit idle before it is closed, and
    /// `statementTimeout` the sessions' `statement_timeout` with `timeouts` (tests shorten both),
    /// and `deadline` how long a call waits for a connection with `timeouts` (tests that load a
    /// small pool on a busy machine lengthen it). `keepAlive`, with `timeouts`: how often the
    /// writer's kept session is pinged when it had no turn (``keepAlive(_:turns:every:logger:)``);
    /// `unanswered` how long a statement may go unanswered, its session not running it, before
    /// its connection is closed (``SilenceWatch/bound``; its first question comes after 2 s or
    /// this, the shorter; tests shorten it).
    public static func open(
        _ url: PostgresURL, poolSize: Int, timeouts: Bool = true, idle: Duration = .seconds(60),
        statementTimeout: Duration = PostgresBackend.statementTimeout, deadline: Duration = .seconds(10),
        keepAlive: Duration = .seconds(30), unanswered: Duration? = nil, logger: Logger
    ) async throws -> PostgresBackend {
        let shared = try url.clientConfiguration(
            poolSize: max(1, poolSize - 1), timeouts: timeouts, idle: idle, statementTimeout: statementTimeout)
        // The server's writer session stays open while the server runs (reopened when lost).
        let own = try url.clientConfiguration(
            poolSize: 1, timeouts: timeouts, name: timeouts ? "coffer-writer" : nil, keep: timeouts ? 1 : 0, idle: idle,
            statementTimeout: statementTimeout)
        // The silence watch's questions (SessionProbe): rare, on a connection of their own.
        let probing = try url.clientConfiguration(
            poolSize: 1, timeouts: timeouts, name: "coffer-probe", idle: .seconds(5), statementTimeout: statementTimeout)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let (started, startedContinuation) = AsyncStream<Void>.makeStream()
        let backend = PostgresBackend(
            client: PostgresClient(configuration: shared, eventLoopGroup: group, backgroundLogger: logger),
            writer: PostgresClient(configuration: own, eventLoopGroup: group, backgroundLogger: logger),
            probes: PostgresClient(configuration: probing, eventLoopGroup: group, backgroundLogger: logger), group: group, url: url,
            deadline: timeouts ? deadline : nil, askedTimeout: timeouts ? statementTimeout : nil,
            silence: timeouts ? unanswered ?? statementTimeout + .seconds(10) : nil, keepAlive: timeouts ? keepAlive : nil, logger: logger,
            started: startedContinuation)
        // Both pools' tasks are on their way into `run()` before the first lease: the driver
        // warns about a lease before `run()` (a scary line in every tool's output), though the
        // lease itself would wait either way. Eight `Task.yield()`s were not always enough.
        var starts = started.makeAsyncIterator()
        _ = await starts.next()
        _ = await starts.next()
        await Task.yield()
        do {
            try await backend.read { connection in
                let rows = try await connection.checkedQuery(
                    "SELECT current_setting('synchronous_commit'), current_setting('server_encoding')", logger: backend.logger)
                for try await (setting, encoding) in rows.decode((String, String).self) {
                    if setting == "off" {
                        backend.logger.warning("synchronous_commit is off on the database: a 201 may be lost if the database server crashes")
                    }
                    if let problem = Self.encodingProblem(encoding) { throw PostgresStoreError.database(problem) }
                }
            }
            // The server's writer session is made now, not by the first redemption.
            if timeouts { try await backend.chainTurn { _ = try await $0.checkedQuery("SELECT 1", logger: backend.logger) } }
        } catch {
            await backend.close()
            throw error
        }
        return backend
    }

    /// What is wrong with a database whose `server_encoding` is `encoding` (nil: UTF8). Coffer
    /// stores text as UTF-8 and compares ids byte for byte: another encoding refuses (or, as
    /// SQL_ASCII, never checks) what a client or a receipt may carry, and a title or file name
    /// outside it would fail at its first write instead of at start.
    static func encodingProblem(_ encoding: String) -> String? {
        guard encoding != "UTF8" else { return nil }
        return
            "the database's encoding is \(encoding), not UTF8: create it with ENCODING 'UTF8' (e.g. createdb --encoding UTF8 --template template0 --owner coffer_owner coffer) and copy the data into it"
    }

    /// Checks a writer session's settings in force before its first batch — at start, and
    /// again whenever the writer's pool opened a new one after a loss: a pooler that drops
    /// startup parameters leaves the role's or the server's (which may change, or differ on a
    /// new primary). Refused (the batch fails, 503; the session is closed) per
    /// ``sessionProblem(timeoutSeconds:isolation:asked:synchronousCommit:)``.
    private func checkSession(_ c: PostgresConnection) async throws {
        guard let asked = askedTimeout, checkedSession.withLock({ $0 }) != c.id else { return }
        let rows = try await c.checkedQuery(
            """
            SELECT extract(epoch FROM current_setting('statement_timeout')::interval)::float8,
              current_setting('default_transaction_isolation'), current_setting('synchronous_commit')
            """, logger: logger)
        var settings: (Double, String, String)?
        for try await row in rows.decode((Double, String, String).self) { settings = row }
        guard let (seconds, isolation, synchronousCommit) = settings else {
            throw PostgresStoreError.database("the session's settings could not be read")
        }
        switch Self.sessionProblem(timeoutSeconds: seconds, isolation: isolation, asked: asked, synchronousCommit: synchronousCommit) {
        case .refused(let problem)?:
            // Closed, not kept for the next batch: the writer's pool keeps its one session
            // open, so a refused one would be refused at every batch until a restart. The
            // next batch opens a session with the role's settings as they are then, so an
            // `ALTER ROLE … SET` mends it while the instance runs.
            try? await c.close()
            throw PostgresStoreError.database(problem)
        case .warning(let problem)?: logger.warning("\(problem)")
        case nil: break
        }
        checkedSession.withLock { $0 = c.id }
    }

    enum SessionProblem: Equatable {
        case refused(String)
        case warning(String)
    }

    /// What is wrong with a writer session that runs with `timeoutSeconds` of
    /// `statement_timeout` and `isolation` by default, where Coffer asked for `asked` and READ
    /// COMMITTED. Refused: a timeout under twice ``PostgresChain/shortestTimer`` (it could end
    /// a batch's wait for synchronous standbys, reported done, in a CALL shorter than the
    /// writer looks for), or another isolation (the writer's reads outside a transaction
    /// block must see the commits made before its lock). A warning: another timeout, none
    /// included (a stuck statement then holds its caller and the chain's lock). Refused too:
    /// `synchronous_commit` off (an `ALTER ROLE`, `ALTER DATABASE` or `ALTER SYSTEM` made for
    /// speed): the flush a redemption waits for before its 201 is then skipped, and a crash of
    /// the database server loses redemptions already answered — which can be redeemed again.
    static func sessionProblem(timeoutSeconds: Double, isolation: String, asked: Duration, synchronousCommit: String = "on") -> SessionProblem? {
        if synchronousCommit == "off" {
            return .refused(
                "the database session runs with synchronous_commit off: a redemption answered 201 could be lost in a crash of the database server and redeemed again. Set it for Coffer's role, e.g. ALTER ROLE coffer_app SET synchronous_commit = on"
            )
        }
        let inForce = Duration.milliseconds(Int64((max(0, min(timeoutSeconds, 1e9)) * 1000).rounded()))
        let askedText = "\(asked.components.seconds)s"
        if inForce > .zero && inForce < PostgresChain.shortestTimer * 2 {
            return .refused(
                "the database session runs with statement_timeout \(inForce), under \(PostgresChain.shortestTimer * 2): a pooler dropping the \(askedText) Coffer asks for? Set it for Coffer's role, e.g. ALTER ROLE coffer_app SET statement_timeout = '\(askedText)'"
            )
        }
        if isolation != "read committed" {
            return .refused(
                "the database session runs with default_transaction_isolation '\(isolation)': a pooler dropping the 'read committed' Coffer asks for? Set it for Coffer's role, e.g. ALTER ROLE coffer_app SET default_transaction_isolation = 'read committed'"
            )
        }
        if inForce != asked {
            return .warning(
                "the database session runs with statement_timeout \(inForce == .zero ? "0 (none)" : "\(inForce)"), not the \(askedText) Coffer asks for: a pooler dropping startup parameters?"
            )
        }
        return nil
    }

    /// Closes every connection: stops the pools, and within ``closeWait`` closes their event
    /// loop, with whatever connections are left, even should a task of the driver never end
    /// (a shutdown that waited for it would hang the process until its supervisor kills it).
    public func close() async {
        sweeper?.cancel()
        running.cancel()
        if await !Self.ends(running, within: Self.closeWait) {
            logger.warning(
                "the database driver had not stopped \(Self.closeWait) after closing began: its connections are closed with its event loop")
        }
        try? await group.shutdownGracefully()
    }

    /// Whether `task` ends within `duration` (it goes on either way: `Task.value` cannot be
    /// given up once awaited in a task group, so both waits are tasks of their own).
    static func ends(_ task: Task<Void, Never>, within duration: Duration) async -> Bool {
        let first = Mutex<CheckedContinuation<Bool, Never>?>(nil)
        let resume: @Sendable (Bool) -> Void = { ended in first.withLock { $0.take() }?.resume(returning: ended) }
        return await withCheckedContinuation { continuation in
            first.withLock { $0 = continuation }
            let sleeper = Task {
                try? await Task.sleep(for: duration)
                resume(false)
            }
            Task {
                await task.value
                resume(true)
                sleeper.cancel()  // not left sleeping out the bound
            }
        }
    }

    /// Pings the writer's session (`SELECT 1`, ``PostgresConnection/checkedQuery(_:logger:)``)
    /// every `interval` in which it had no chain turn, until cancelled (``close()``): a
    /// middlebox that drops idle TCP flows (a NAT, a load balancer) would otherwise cut it in a
    /// quiet hour, and the first redemption after it would find out. In place of the driver's
    /// own keep-alive (off, ``PostgresURL/clientConfiguration(poolSize:timeouts:name:keep:idle:statementTimeout:)``):
    /// postgres-nio 1.33 writes that ping with no check, and one written just after the
    /// server ended the session (a restart) is never answered, and its pool's `run()` — so
    /// ``close()`` — waits for it forever. This ping leases the connection like a turn, so it
    /// never runs beside one, and a session lost on the way costs the writer nothing: the pool
    /// opens the next one.
    private static func keepAlive(_ writer: PostgresClient, turns: TurnCount, every interval: Duration, logger: Logger) async {
        var seen = turns.value
        while !Task.isCancelled {
            do { try await Task.sleep(for: interval) } catch { return }
            let now = turns.value
            guard now == seen else {
                seen = now
                continue
            }
            do {
                _ = try await writer.withConnection { try await $0.checkedQuery("SELECT 1", logger: logger) }
            } catch  where !Task.isCancelled {
                logger.warning("the ledger writer's idle database session did not answer its keep-alive: \(PostgresStoreError.wrapping(error))")
            } catch {
                return
            }
        }
    }

    /// The pools of a backend: ``client``, ``writer``, ``probes``.
    enum Pool {
        case shared, writer
        /// One connection, opened when needed and closed 5 s after use: one that is not one
        /// of a lost server's silent connections (``SilenceWatch``).
        case probe
    }

    /// Runs `body` on a leased connection (reads) of `pool`.
    func read<T: Sendable>(on pool: Pool = .shared, _ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        do {
            return try await withConnection(on: pool, body)
        } catch {
            throw PostgresStoreError.wrapping(error)
        }
    }

    /// Runs `body` on a leased connection, failing with ``PostgresStoreError/timedOut`` when no
    /// connection came within ``deadline`` (the driver's pool waits for one as long as it takes,
    /// so a database that is down would hold every request).
    ///
    /// The deadline covers the wait for the connection only. Once `body` has its connection it
    /// runs to the end, bounded by the server's `statement_timeout`, `lock_timeout` and
    /// `idle_in_transaction_session_timeout`: the driver's queries do not stop when their task
    /// is cancelled, so a deadline during `body` would answer 503 for a transaction that then
    /// commits — a 201 the buyer never sees, and every retry a 409. Whichever comes first, the
    /// connection or the deadline, wins (``LeaseRace``): a connection granted after the
    /// deadline runs nothing.
    private func withConnection<T: Sendable>(
        deadline: Duration? = nil, on pool: Pool = .shared, _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        let client =
            switch pool {
            case .shared: self.client
            case .writer: self.writer
            case .probe: self.probes
            }
        guard let deadline = deadline ?? self.deadline else { return try await client.withConnection(body) }
        // Bound here, inherited by the race's tasks.
        return try await Self.$silence.withValue(watch) { try await race(client, deadline: deadline, body) }
    }

    private func race<T: Sendable>(
        _ client: PostgresClient, deadline: Duration, _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        let race = LeaseRace()
        return try await withThrowingTaskGroup(of: T?.self) { [loop, sessions, logger] group in
            group.addTask {
                try await client.withConnection { connection in
                    guard race.connect() else { throw PostgresStoreError.timedOut(deadline) }
                    try await sessions.learn(connection, logger: logger)
                    return try await body(connection)
                }
            }
            group.addTask {
                try await Self.sleep(on: loop, for: deadline)
                guard race.expire() else { return nil }  // connected in time: wait for the body
                throw PostgresStoreError.timedOut(deadline)
            }
            defer { group.cancelAll() }
            while let result = try await group.next() {
                if let result { return result }
            }
            throw PostgresStoreError.timedOut(deadline)
        }
    }

    /// Waits `duration`; throws `CancellationError` when cancelled. On `loop`'s own thread (the
    /// ledger writer's lease, once per batch) a NIO timer of that loop: an insert into its timer
    /// heap, where `Task.sleep` registers a dispatch timer source and cancels it again (~80 µs of
    /// the writer's thread per batch, perf at 2,000 redemptions/s). From any other thread
    /// `Task.sleep`: a NIO timer scheduled from outside wakes the loop, and once the loop has
    /// shut down it is dropped without failing, so nothing would ever end the wait.
    static func sleep(on loop: any EventLoop, for duration: Duration) async throws {
        guard loop.inEventLoop else { return try await Task.sleep(for: duration) }
        let timer = loop.scheduleTask(in: TimeAmount(duration)) {}
        do {
            try await withTaskCancellationHandler {
                try await timer.futureResult.get()
            } onCancel: {
                timer.cancel()
            }
        } catch {
            // Cancelled, or the loop shutting down (the backend closing): either way the
            // caller stops waiting for a connection.
            if Task.isCancelled { throw CancellationError() }
            throw PostgresStoreError.database("the database connection's event loop stopped: \(error)")
        }
    }

    /// Runs `body` in one transaction — READ COMMITTED unless `isolation` says otherwise, never
    /// the server's default (the chain's lock relies on each statement seeing the commits made
    /// before it): committed when it returns, rolled back when it throws; the connection within
    /// ``deadline`` (`deadline` overrides it for this call, when the backend has one: tests).
    @discardableResult
    func transaction<T: Sendable>(
        isolation: String = "READ COMMITTED", deadline: Duration? = nil, on pool: Pool = .shared,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        do {
            return try await withConnection(deadline: self.deadline == nil ? nil : deadline, on: pool) { [logger] connection in
                try await Self.inTransaction(connection, isolation: isolation, logger: logger, body)
            }
        } catch {
            throw PostgresStoreError.wrapping(error)
        }
    }

    /// Runs `body` — ``PostgresChain/take(_:purchases:logger:)``, reads, then one write that
    /// commits by itself and lets the chain's session lock go — outside a transaction block, on
    /// the writer's own connection (``writer``) within ``deadline``. When `body` throws, the
    /// session lock is let go (`coffer_abandon_chain`); when that fails as well, the connection
    /// is closed, so the server lets it go with the session: a connection never returns to the
    /// pool holding it.
    /// `lease` shortens ``deadline`` for this turn (the ledger writer's jobs that already waited).
    func chainTurn<T: Sendable>(lease: Duration? = nil, _ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        do {
            turns.add()
            return try await withConnection(deadline: lease, on: .writer) { [logger] connection in
                do {
                    try await self.checkSession(connection)
                    return try await body(connection)
                } catch {
                    await PostgresChain.letGo(connection, logger: logger)
                    throw error
                }
            }
        } catch {
            throw PostgresStoreError.wrapping(error)
        }
    }

    /// ``transaction(isolation:_:)`` without the deadline, for tools that copy or read a whole ledger.
    func unboundedTransaction<T: Sendable>(isolation: String = "READ COMMITTED", _ body: (PostgresConnection) async throws -> T) async throws -> T {
        do {
            return try await client.withConnection { [logger] connection in
                try await Self.inTransaction(connection, isolation: isolation, logger: logger, body)
            }
        } catch {
            throw PostgresStoreError.wrapping(error)
        }
    }

}

extension PostgresBackend {
    /// BEGIN, `body`, COMMIT — or ROLLBACK when `body` throws.
    fileprivate static func inTransaction<T>(
        _ connection: PostgresConnection, isolation: String, logger: Logger, _ body: (PostgresConnection) async throws -> T
    ) async throws -> T {
        try await connection.checkedQuery(PostgresQuery(unsafeSQL: "BEGIN ISOLATION LEVEL \(isolation)"), logger: logger)
        do {
            let result = try await body(connection)
            try await connection.checkedQuery("COMMIT", logger: logger)
            return result
        } catch {
            await connection.rollbackIfOpen(logger: logger)
            throw error
        }
    }
}

/// A count of the writer's chain turns (``PostgresBackend/chainTurn(lease:_:)``), seen by its keep-alive task.
final class TurnCount: Sendable {
    private let count = Atomic<UInt64>(0)
    var value: UInt64 { count.load(ordering: .relaxed) }
    func add() { count.add(1, ordering: .relaxed) }
}

/// The race between a connection and the deadline: the first to claim it wins, once.
final class LeaseRace: Sendable {
    private enum State: UInt8 {
        case waiting, connected, expired
    }

    private let state = Atomic<UInt8>(State.waiting.rawValue)

    /// True when the connection came first: the body may run.
    func connect() -> Bool { claim(.connected) }

    /// True when the deadline came first: the caller answers "timed out" and the body never runs.
    func expire() -> Bool { claim(.expired) }

    private func claim(_ outcome: State) -> Bool {
        state.compareExchange(expected: State.waiting.rawValue, desired: outcome.rawValue, ordering: .acquiringAndReleasing).exchanged
    }
}

/// Errors of the PostgreSQL backend. Everything the driver or the server raises arrives as
/// ``database(_:)``: a storage failure (503), its details for the log only.
public enum PostgresStoreError: Error, Sendable, CustomStringConvertible {
    /// The driver or the server failed (connection refused or lost, timeout, constraint, …).
    case database(String)
    /// The database records migrations this binary does not know: it was migrated by a newer build.
    case unknownMigrations([String])
    /// A stored value could not be mapped back to the model.
    case invalidValue(column: String, value: String)
    /// The ledger's writer has finished (the instance is shutting down).
    case closed
    /// A read or transaction took longer than the backend's deadline (the database is down or stuck).
    case timedOut(Duration)
    /// `coffer ledger copy` needs an empty ledger to copy into.
    case notEmpty(String)
    /// A statement had no answer and its session was found lost (``StatementWatch``): its
    /// connection was closed. The connection was dead, not the database.
    case sessionLost

    /// Our own errors (and the ledger's integrity errors) pass; the driver's become ``database(_:)``.
    static func wrapping(_ error: any Error) -> any Error {
        switch error {
        case is PostgresStoreError, is LedgerIntegrityError, is LedgerWriteInDoubt, is CancellationError: error
        case let error as PSQLError: PostgresStoreError.database(PostgresStoreError.describe(error))
        default: PostgresStoreError.database(String(reflecting: error))
        }
    }

    /// The server's message and SQLSTATE, or the driver's code (PSQLError's own description
    /// hides both, to keep query values out of logs by default; these carry none).
    static func describe(_ error: PSQLError) -> String {
        guard let server = error.serverInfo else { return "\(error.code)" + (error.underlying.map { ": \($0)" } ?? "") }
        return "\(server[.message] ?? "server error") (SQLSTATE \(server[.sqlState] ?? "?"))"
    }

    public var description: String {
        switch self {
        case .database(let detail): "PostgreSQL: \(detail)"
        case .unknownMigrations(let names): "the database was migrated by a newer Coffer (\(names.joined(separator: ", ")))"
        case .invalidValue(let column, let value): "unexpected value in \(column): \(value.prefix(80))"
        case .closed: "the ledger's writer has finished: the server is shutting down"
        case .timedOut(let deadline): "no answer from the database within \(deadline)"
        case .notEmpty(let what): "the target database is not empty (\(what)): copy into a new database"
        case .sessionLost: "PostgreSQL: no answer to a statement, and its session was lost: its connection was closed"
        }
    }
}

/// The database's failures are storage failures: 503 `storageUnavailable` with `Retry-After`.
extension PostgresStoreError: StorageFailure {}

extension PostgresStoreError {
    /// A statement failed by ``StatementWatch``: its connection was closed, its server lost.
    var isSessionLost: Bool {
        if case .sessionLost = self { return true }
        return false
    }
}

extension PostgresConnection {
    /// `query`, sent only while the connection is open, the check and the write on the
    /// connection's own event loop, where the channel cannot close between them.
    /// postgres-nio 1.33 never answers a query written to a channel that has closed (its
    /// promise goes with the dropped write): a body whose session the server ended between
    /// two statements waited forever, holding its lease
    /// (`aTransactionOnAnEndedSessionFailsAndTheNextRuns`). Already on that loop (the ledger
    /// writer), no hop; from elsewhere, one there and back.
    ///
    /// Within a backend's calls (``PostgresBackend/silence``) a statement without an answer
    /// is watched (``SilenceWatch``): a connection whose server lost it is closed.
    @discardableResult
    func checkedQuery(_ query: PostgresQuery, logger: Logger) async throws -> PostgresRowSequence {
        try await checkedQuery(query, logger: logger, streaming: false).rows
    }

    /// ``checkedQuery(_:logger:)``; `streaming`: the statement's watch goes on after its first
    /// answer, while its rows come, and is returned — the caller reads every row, then calls
    /// ``StatementWatch/answered()`` (``rows(_:logger:_:)`` and ``column(_:_:logger:)`` do).
    func checkedQuery(_ query: PostgresQuery, logger: Logger, streaming: Bool) async throws -> (rows: PostgresRowSequence, watch: StatementWatch?) {
        let watch = PostgresBackend.silence
        if eventLoop.inEventLoop { return try await queryIfOpen(query, logger: logger, watch: watch, streaming: streaming) }
        // Closed stays closed: fail without the hop (a loop shut down drops the jobs sent to it).
        guard !isClosed else { throw Self.closedBeforeSending }
        return try await withTaskExecutorPreference(EventLoopTaskExecutor(eventLoop)) {
            try await queryIfOpen(query, logger: logger, watch: watch, streaming: streaming)
        }
    }

    static let closedBeforeSending = PostgresStoreError.database("the connection was closed before the statement was sent")

    /// Whether `error` is a statement failed by ``StatementWatch``: its connection was dead, not the database.
    static func lostSession(_ error: any Error) -> Bool { (error as? PostgresStoreError)?.isSessionLost ?? false }

    private func queryIfOpen(_ query: PostgresQuery, logger: Logger, watch: SilenceWatch?, streaming: Bool) async throws -> (
        rows: PostgresRowSequence, watch: StatementWatch?
    ) {
        guard !isClosed else { throw Self.closedBeforeSending }
        guard let watch else { return (try await self.query(query, logger: logger), nil) }
        let statement = StatementWatch(watch, self, logger: logger)
        let rows: PostgresRowSequence
        do {
            rows = try await self.query(query, logger: logger)
        } catch {
            statement.answered()
            if statement.closed { throw PostgresStoreError.sessionLost }
            throw error
        }
        guard streaming else {
            statement.answered()
            return (rows, nil)
        }
        statement.firstAnswer()
        return (rows, statement)
    }

    /// ROLLBACK, unless the connection is closed (``checkedQuery(_:logger:)``).
    func rollbackIfOpen(logger: Logger) async {
        _ = try? await checkedQuery("ROLLBACK", logger: logger)
    }
}

/// A task executor on one event loop: the jobs of a task that prefers it
/// (`withTaskExecutorPreference`) run on that loop's thread. The ledger writer holds the
/// chain's lock across several round trips; on the cooperative pool each resumption would
/// wait behind receipt verifications (jobs of ~0.3 ms), lengthening every batch of every
/// instance. On the loop that reads the connection's answers it resumes at once.
final class EventLoopTaskExecutor: TaskExecutor {
    private let loop: any EventLoop

    init(_ loop: any EventLoop) { self.loop = loop }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        loop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
