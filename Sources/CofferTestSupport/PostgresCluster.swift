import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A real PostgreSQL server for tests: a throwaway cluster in a temporary directory on a free
/// port of 127.0.0.1, trust authentication, superuser `postgres`, driven through Debian's
/// binaries (`apt-get install postgresql`: `/usr/lib/postgresql/VERSION/bin`, the highest
/// version wins). `fsync` and `synchronous_commit` stay on, as in production.
///
///     let cluster = try await PostgresCluster.start()       // or `.shared()` for contract tests
///     let url = try await cluster.createDatabase()           // postgres://postgres@127.0.0.1:PORT/coffer_…
///     try await cluster.stop(); try await cluster.start()          // fault tests: same port, same data
///     try cluster.destroy()                            // server stopped, directory removed
///
/// As root (CI), `initdb` and `pg_ctl` refuse to run: they run as the `postgres` user through
/// `runuser`, in a directory that user owns. The cluster is `initdb --no-locale -E UTF8`:
/// text sorts by bytes, as SQLite's default collation does.
///
/// The server never outlives the test process: a watchdog shell started with the cluster
/// stops it (`-m immediate`) and removes the directory once this process is gone, however it
/// ended; ``destroy()`` (or `deinit`) does the same at once.
public final class PostgresCluster: Sendable {
    /// A cluster could not start, or a command failed. The description says what to do.
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
        public init(_ description: String) { self.description = description }
    }

    /// How ``stop(mode:)`` shuts the server down (`pg_ctl stop -m`).
    public enum StopMode: String, Sendable {
        /// Waits for the clients to disconnect.
        case smart
        /// Disconnects the clients, rolls back their transactions, checkpoints.
        case fast
        /// Kills every server process: a crash; the next start runs recovery.
        case immediate
    }

    /// Names a server the developer runs (`postgres://USER[:PASS]@HOST:PORT/DB`):
    /// ``shared()`` uses it instead of starting a cluster.
    public static let externalURLVariable = "COFFER_TEST_POSTGRES_URL"

    /// The server's TCP port on 127.0.0.1 (or the external server's port).
    public let port: Int
    /// The cluster's directory: `data/` (the data directory), `postgres.log`, the Unix socket.
    /// Nil for an external server.
    public let directory: URL?
    private let server: Server
    private let state: Mutex<State>

    private enum Server: Sendable {
        case owned(Owned)
        /// `COFFER_TEST_POSTGRES_URL` and the psql to reach it with.
        case external(url: String, psql: String)
    }

    private struct Owned: Sendable {
        var binaries: Binaries
        var directory: URL
        /// Root: initdb and pg_ctl run as `postgres` through runuser.
        var runsAsPostgres: Bool
        var data: URL { directory.appendingPathComponent("data") }
        var log: URL { directory.appendingPathComponent("postgres.log") }
    }

    private struct State {
        var destroyed = false
        /// The watchdog shell, reaped by ``destroy()``.
        var watchdog: pid_t?
    }

    private init(port: Int, directory: URL?, server: Server, watchdog: pid_t?) {
        self.port = port
        self.directory = directory
        self.server = server
        self.state = Mutex(State(watchdog: watchdog))
    }

    deinit { try? destroy() }

    // MARK: Starting

    /// Starts a new cluster: `initdb`, then `pg_ctl start` on a free port (another port when
    /// the picked one was taken before the server bound it). About 1–3 s, on a thread of its
    /// own (``offThePool(_:)``), as every wait for the server's tools here.
    public static func start() async throws -> PostgresCluster {
        try await offThePool { try startBlocking() }
    }

    private static func startBlocking() throws -> PostgresCluster {
        let binaries = try Binaries.find()
        let runsAsPostgres = geteuid() == 0
        let directory = try makeClusterDirectory(runsAsPostgres: runsAsPostgres)
        let owned = Owned(binaries: binaries, directory: directory, runsAsPostgres: runsAsPostgres)
        // From here on a crash of this process leaves nothing behind.
        let watchdog: pid_t
        do {
            watchdog = try startWatchdog(owned)
        } catch {
            try? FileManager.default.removeItem(at: directory)
            throw error
        }
        do {
            try run(
                binaries.initdb,
                ["-D", owned.data.path, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "--no-locale"],
                owned: owned, what: "initdb")
            let port = try launchOnFreePort(owned)
            return PostgresCluster(port: port, directory: directory, server: .owned(owned), watchdog: watchdog)
        } catch {
            stopWatchdog(watchdog)
            _ = try? execute(binaries.pgCtl, ["-D", owned.data.path, "-m", "immediate", "-w", "stop"], owned: owned)
            try? FileManager.default.removeItem(at: directory)
            throw error
        }
    }

    /// `pg_ctl start` on a free port; another port when another process took the picked one
    /// between ``freePort()`` and the server's bind. Returns the port.
    private static func launchOnFreePort(_ owned: Owned) throws -> Int {
        var attempt = 0
        while true {
            attempt += 1
            let port = try freePort()
            try? FileManager.default.removeItem(at: owned.log)
            let started = try execute(owned.binaries.pgCtl, startArguments(owned, port: port), owned: owned)
            if started.status == 0 { return port }
            let log = (try? String(contentsOf: owned.log, encoding: .utf8)) ?? ""
            if attempt < 5, log.contains("Address already in use") { continue }
            throw Failure("pg_ctl start on port \(port) failed (status \(started.status)): \(started.stderr)\npostgres.log:\n\(log.suffix(4000))")
        }
    }

    private static let sharedCluster = Mutex<Result<PostgresCluster, any Error>?>(nil)

    /// The cluster the contract tests share: started on the first call (once per test process,
    /// whichever thread asks first), or the server `COFFER_TEST_POSTGRES_URL` names. A failure
    /// is kept: every later call throws it again at once. Give each test its own database
    /// (``createDatabase(_:)``); never stop or destroy this one.
    public static func shared() async throws -> PostgresCluster {
        try await offThePool { try sharedBlocking() }
    }

    private static func sharedBlocking() throws -> PostgresCluster {
        try sharedCluster.withLock { cached in
            if let cached { return try cached.get() }
            let result = Result { () throws -> PostgresCluster in
                if let url = ProcessInfo.processInfo.environment[externalURLVariable], !url.isEmpty {
                    return try external(url: url)
                }
                return try startBlocking()
            }
            cached = result
            return try result.get()
        }
    }

    /// A server someone else runs (`postgres://USER[:PASS]@HOST:PORT/DB`): databases are made
    /// with `CREATE DATABASE` over psql; ``stop(mode:)``, ``start()`` and ``destroy()`` do not
    /// touch it.
    public static func external(url: String) throws -> PostgresCluster {
        guard let components = URLComponents(string: url), let scheme = components.scheme,
            scheme == "postgres" || scheme == "postgresql", let host = components.host, !host.isEmpty
        else {
            throw Failure("\(externalURLVariable)=\(url) is not a postgres://USER[:PASS]@HOST:PORT/DB URL")
        }
        let cluster = PostgresCluster(
            port: components.port ?? 5432, directory: nil, server: .external(url: url, psql: try Binaries.findPSQL()),
            watchdog: nil)
        do {
            _ = try cluster.psqlBlocking("SELECT 1", database: components.path.isEmpty ? "postgres" : String(components.path.dropFirst()))
        } catch {
            throw Failure("\(externalURLVariable)=\(url): the server does not answer: \(error)")
        }
        return cluster
    }

    // MARK: Databases and SQL

    /// `postgres://postgres@127.0.0.1:PORT/DATABASE?sslmode=disable`; for an external server
    /// its URL with the database replaced.
    public func url(database: String) -> String {
        let path = "/" + (database.addingPercentEncoding(withAllowedCharacters: Self.pathAllowed) ?? database)
        switch server {
        case .owned:
            return "postgres://postgres@127.0.0.1:\(port)\(path)?sslmode=disable"
        case .external(let url, _):
            guard var components = URLComponents(string: url) else { return url }
            components.percentEncodedPath = path
            return components.string ?? url
        }
    }

    /// Creates a database (`coffer_` and a UUID's hex when `name` is nil) and returns its URL.
    @discardableResult
    public func createDatabase(_ name: String? = nil) async throws -> String {
        try await offThePool { try self.createDatabaseBlocking(name) }
    }

    private func createDatabaseBlocking(_ name: String?) throws -> String {
        let name = name ?? "coffer_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        switch server {
        case .owned(let owned):
            try Self.run(
                owned.binaries.createdb, ["-h", "127.0.0.1", "-p", String(port), "-U", "postgres", name], owned: nil,
                what: "createdb \(name)")
        case .external:
            let quoted = "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
            _ = try psqlBlocking("CREATE DATABASE \(quoted)", database: maintenanceDatabase)
        }
        return url(database: name)
    }

    /// Runs `sql` through `psql -X -A -t -q -v ON_ERROR_STOP=1` and returns what it printed:
    /// rows one a line, columns separated by `|`, no header, no trailing newline. For tests that
    /// look at or tamper with rows behind the server's back. Throws when psql fails (a SQL
    /// error, or the server is down).
    /// psql runs on a thread of its own (``offThePool(_:)``): it may wait for a lock this
    /// process's own sessions hold.
    @discardableResult
    public func psql(_ sql: String, database: String = "postgres") async throws -> String {
        try await offThePool { try self.psqlBlocking(sql, database: database) }
    }

    /// Runs `sql` as ``psql(_:database:)`` does, in a session with `setting`
    /// (`options=-c name=value`); returns what psql printed on stderr (the server's notices and
    /// warnings). Throws when psql fails.
    public func psqlNotices(_ sql: String, database: String = "postgres", setting: (name: String, value: String)) async throws -> String {
        try await offThePool { try self.psqlOutput(sql, database: database, setting: setting).stderr }
    }

    /// ``psql(_:database:)`` on the calling thread: for the cluster's own set-up, never from a test's task.
    private func psqlBlocking(_ sql: String, database: String) throws -> String {
        var text = try psqlOutput(sql, database: database, setting: nil).stdout
        while text.hasSuffix("\n") { text.removeLast() }
        return text
    }

    private func psqlOutput(_ sql: String, database: String, setting: (name: String, value: String)?) throws -> Output {
        try Self.run(
            psqlPath, ["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-d", Self.url(url(database: database), setting: setting), "-c", sql],
            owned: nil, what: "psql on \(database)")
    }

    private var psqlPath: String {
        switch server {
        case .owned(let owned): owned.binaries.psql
        case .external(_, let path): path
        }
    }

    /// `url` with `setting` for the session (`options=-c name=value`), after a statement
    /// timeout of 5 minutes: a psql waiting for a lock a test's own session holds (a test's
    /// mistake) fails it instead of hanging the whole run until CI's limit.
    static func url(_ url: String, setting: (name: String, value: String)?) -> String {
        guard var components = URLComponents(string: url) else { return url }
        let options = ["-c statement_timeout=300000"] + (setting.map { ["-c \($0.name)=\($0.value)"] } ?? [])
        components.queryItems = (components.queryItems ?? []) + [URLQueryItem(name: "options", value: options.joined(separator: " "))]
        return components.string ?? url
    }

    // MARK: Faults

    /// Stops the server (`pg_ctl stop -m MODE -w`); data and port are kept for ``start()``.
    public func stop(mode: StopMode = .fast) async throws {
        try await offThePool { try self.stopBlocking(mode: mode) }
    }

    private func stopBlocking(mode: StopMode) throws {
        let owned = try ownedServer("stop")
        try Self.run(owned.binaries.pgCtl, ["-D", owned.data.path, "-m", mode.rawValue, "-w", "stop"], owned: owned, what: "pg_ctl stop")
    }

    /// Starts the stopped server again: same data directory, same port.
    public func start() async throws {
        try await offThePool { try self.startBlocking() }
    }

    private func startBlocking() throws {
        let owned = try ownedServer("start")
        let output = try Self.execute(owned.binaries.pgCtl, Self.startArguments(owned, port: port), owned: owned)
        guard output.status == 0 else {
            let log = (try? String(contentsOf: owned.log, encoding: .utf8)) ?? ""
            throw Failure(
                "pg_ctl start on port \(port) failed (status \(output.status)): \(output.stderr)\npostgres.log:\n\(log.suffix(4000))")
        }
    }

    /// ``stop(mode:)`` then ``start()``.
    public func restart(mode: StopMode = .fast) async throws {
        try await offThePool {
            try self.stopBlocking(mode: mode)
            try self.startBlocking()
        }
    }

    /// Stops the server at once (`-m immediate`) and removes the directory. Idempotent; an
    /// external server is left alone.
    public func destroy() throws {
        guard case .owned(let owned) = server else { return }
        let first = state.withLock { state in
            if state.destroyed { return false }
            state.destroyed = true
            if let watchdog = state.watchdog { Self.stopWatchdog(watchdog) }
            state.watchdog = nil
            return true
        }
        guard first else { return }
        if FileManager.default.fileExists(atPath: owned.data.appendingPathComponent("postmaster.pid").path) {
            // Fails when the server is already down (a stale pid file after a crash): fine.
            _ = try Self.execute(owned.binaries.pgCtl, ["-D", owned.data.path, "-m", "immediate", "-w", "stop"], owned: owned)
        }
        try FileManager.default.removeItem(at: owned.directory)
    }

    private func ownedServer(_ operation: String) throws -> Owned {
        switch server {
        case .owned(let owned): return owned
        case .external(let url, _): throw Failure("\(operation): \(url) is a server this process did not start")
        }
    }

    private var maintenanceDatabase: String {
        guard case .external(let url, _) = server, let path = URLComponents(string: url)?.path, path.count > 1 else { return "postgres" }
        return String(path.dropFirst())
    }

    private static let pathAllowed = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")

    // MARK: Processes

    private static func startArguments(_ owned: Owned, port: Int) -> [String] {
        let options = [
            "-p", String(port), "-k", shellQuoted(owned.directory.path), "-c", "listen_addresses=127.0.0.1",
            "-c", "max_connections=200",
            // The defaults, said out loud: a commit is flushed before the server answers.
            "-c", "fsync=on", "-c", "synchronous_commit=on",
        ]
        return ["-D", owned.data.path, "-l", owned.log.path, "-w", "-t", "60", "-o", options.joined(separator: " "), "start"]
    }

    /// pg_ctl hands `-o` to a shell.
    private static func shellQuoted(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }

    struct Output {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    /// ``execute(_:_:owned:)`` that throws unless the command exits with 0.
    @discardableResult
    private static func run(_ tool: String, _ arguments: [String], owned: Owned?, what: String) throws -> Output {
        let output = try execute(tool, arguments, owned: owned)
        guard output.status == 0 else {
            throw Failure("\(what) failed (status \(output.status)): \(output.stderr)\(output.stdout)")
        }
        return output
    }

    /// Runs `tool` and waits for it. With `owned` it runs in the cluster's directory (runuser
    /// keeps the working directory, which `postgres` may not be allowed to enter), as
    /// `postgres` when we are root.
    private static func execute(_ tool: String, _ arguments: [String], owned: Owned?) throws -> Output {
        var environment = ProcessInfo.processInfo.environment
        environment["PGCONNECT_TIMEOUT"] = "10"
        let output: ChildProcess.Output
        do {
            if let owned, owned.runsAsPostgres {
                output = try ChildProcess.run(
                    try Binaries.runuser(), ["-u", "postgres", "--", tool] + arguments, directory: owned.directory.path,
                    environment: environment)
            } else {
                output = try ChildProcess.run(tool, arguments, directory: owned?.directory.path, environment: environment)
            }
        } catch let error as ChildProcess.Failure {
            throw Failure(error.description)
        }
        return Output(status: output.status, stdout: output.stdout, stderr: output.stderr)
    }

    /// A shell that waits for this process to end (or the directory to go), then stops the
    /// server and removes the directory. Arguments: this process's id, the directory, runuser
    /// (empty when we are not root), pg_ctl. It ignores SIGINT, SIGHUP and SIGTERM: a Ctrl-C or a
    /// CI runner's SIGTERM to the process group must not end it before it has cleaned up.
    private static func startWatchdog(_ owned: Owned) throws -> pid_t {
        let script = """
            trap '' INT HUP TERM
            while kill -0 "$1" 2>/dev/null && [ -d "$2" ]; do sleep 1; done
            [ -d "$2" ] || exit 0
            cd "$2"
            if [ -f "$2/data/postmaster.pid" ]; then
                if [ -n "$3" ]; then "$3" -u postgres -- "$4" -D "$2/data" -m immediate -w stop
                else "$4" -D "$2/data" -m immediate -w stop; fi
            fi
            rm -rf "$2"
            """
        do {
            return try ChildProcess.start(
                "/bin/sh",
                [
                    "-c", script, "coffer-postgres-watchdog", String(getpid()), owned.directory.path,
                    owned.runsAsPostgres ? try Binaries.runuser() : "",
                    owned.binaries.pgCtl,
                ],
                environment: ProcessInfo.processInfo.environment)
        } catch {
            throw Failure("cannot start the cluster's watchdog (/bin/sh): \(error)")
        }
    }

    private static func stopWatchdog(_ watchdog: pid_t) {
        kill(watchdog, SIGKILL)  // it ignores SIGTERM
        ChildProcess.wait(watchdog)
    }

    // MARK: Directory and port

    /// A new directory `coffer-postgres-<UUID>` under the temporary directory (under /tmp when
    /// `postgres` could not reach the temporary directory), owned by `postgres` when we are root.
    private static func makeClusterDirectory(runsAsPostgres: Bool) throws -> URL {
        guard runsAsPostgres else { return try makeTemporaryDirectory(prefix: "coffer-postgres") }
        guard let user = getpwnam("postgres") else {
            throw Failure(
                "running as root, the cluster runs as the user postgres, which does not exist: apt-get install postgresql "
                    + "(it creates the user), or set \(externalURLVariable) to a server you run")
        }
        let (uid, gid) = (user.pointee.pw_uid, user.pointee.pw_gid)
        var parent = FileManager.default.temporaryDirectory.standardizedFileURL
        if !othersCanTraverse(parent) { parent = URL(fileURLWithPath: "/tmp") }
        let directory = parent.appendingPathComponent("coffer-postgres-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: false)
        guard chown(directory.path, uid, gid) == 0, chmod(directory.path, 0o755) == 0 else {
            let error = errno
            try? FileManager.default.removeItem(at: directory)
            throw Failure("cannot give \(directory.path) to postgres: errno \(error)")
        }
        return directory
    }

    /// Whether every directory from `/` down to `url` has the others' execute bit.
    private static func othersCanTraverse(_ url: URL) -> Bool {
        var path = url.path
        while true {
            var info = stat()
            guard stat(path, &info) == 0, info.st_mode & S_IXOTH != 0 else { return false }
            if path == "/" || path.isEmpty { return true }
            path = (path as NSString).deletingLastPathComponent
        }
    }

    /// A port nobody listens on: bind port 0 on 127.0.0.1, read the port, close.
    static func freePort() throws -> Int {
        #if canImport(Darwin)
            let fd = socket(AF_INET, SOCK_STREAM, 0)
        #else
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #endif
        guard fd >= 0 else { throw Failure("socket() failed: errno \(errno)") }
        defer { close(fd) }
        var address = sockaddr_in()
        #if canImport(Darwin)
            address.sin_len = UInt8(MemoryLayout<sockaddr_in>.size)
        #endif
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = in_addr_t(0x7F00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        guard bound == 0 else { throw Failure("bind(127.0.0.1:0) failed: errno \(errno)") }
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else { throw Failure("getsockname failed: errno \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    // MARK: Binaries

    struct Binaries: Sendable {
        var directory: String
        var initdb: String { directory + "/initdb" }
        var pgCtl: String { directory + "/pg_ctl" }
        var psql: String { directory + "/psql" }
        var createdb: String { directory + "/createdb" }

        static let tools = ["initdb", "pg_ctl", "postgres", "psql", "createdb"]

        /// The highest version under `/usr/lib/postgresql/*/bin` that has every tool, else the
        /// first `PATH` directory that has them (Homebrew, Postgres.app).
        static func find(
            root: String = "/usr/lib/postgresql", path: String? = ProcessInfo.processInfo.environment["PATH"]
        ) throws -> Binaries {
            for directory in versionDirectories(root) + (path ?? "").split(separator: ":").map(String.init)
            where tools.allSatisfy({ FileManager.default.isExecutableFile(atPath: directory + "/" + $0) }) {
                return Binaries(directory: directory)
            }
            throw Failure(
                "PostgreSQL server binaries not found (\(tools.joined(separator: ", ")) under \(root)/*/bin or on PATH): "
                    + "install them with `apt-get install postgresql` (Debian/Ubuntu; .ci/run does), "
                    + "or run a server yourself and set \(externalURLVariable)=postgres://USER@HOST:PORT/postgres")
        }

        /// psql alone, for an external server.
        static func findPSQL(root: String = "/usr/lib/postgresql", path: String? = ProcessInfo.processInfo.environment["PATH"]) throws -> String {
            for directory in versionDirectories(root) + (path ?? "").split(separator: ":").map(String.init)
            where FileManager.default.isExecutableFile(atPath: directory + "/psql") {
                return directory + "/psql"
            }
            throw Failure("psql not found (under \(root)/*/bin or on PATH): apt-get install postgresql-client")
        }

        /// `root/VERSION/bin`, highest version first (15 before 9.6).
        static func versionDirectories(_ root: String) -> [String] {
            let versions = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
            func key(_ version: String) -> [Int] { version.split(separator: ".").map { Int($0) ?? -1 } }
            return versions.sorted { key($0).lexicographicallyPrecedes(key($1)) }.reversed().map { "\(root)/\($0)/bin" }
        }

        static func runuser() throws -> String {
            for candidate in ["/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser"]
            where FileManager.default.isExecutableFile(atPath: candidate) {
                return candidate
            }
            throw Failure("running as root needs runuser (util-linux) to run initdb and pg_ctl as postgres: apt-get install util-linux")
        }
    }
}
