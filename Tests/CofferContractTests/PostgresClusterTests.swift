import Foundation
import Testing

@testable import CofferTestSupport

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// ``PostgresCluster``: the throwaway PostgreSQL server the PostgreSQL contract tests run on.
/// Fails (never skips) where the binaries are missing: the error says how to install them.
@Suite("PostgreSQL throwaway cluster")
struct PostgresClusterTests {
    @Test("start, two databases, stop, start again, destroy: the directory and the server are gone")
    func lifecycle() async throws {
        let cluster = try await PostgresCluster.start()
        let directory = try #require(cluster.directory)
        let port = cluster.port

        let first = try await cluster.createDatabase()
        let second = try await cluster.createDatabase("coffer_second")
        #expect(second == "postgres://postgres@127.0.0.1:\(port)/coffer_second?sslmode=disable")
        #expect(first.hasPrefix("postgres://postgres@127.0.0.1:\(port)/coffer_") && first != second)
        let firstName = String(try #require(URLComponents(string: first)).path.dropFirst())
        #expect(try await cluster.psql("SELECT 1", database: firstName) == "1")
        #expect(try await cluster.psql("SELECT 1", database: "coffer_second") == "1")
        await #expect(throws: (any Error).self) { try await cluster.createDatabase("coffer_second") }

        // The databases are separate; rows, columns and durability settings as psql prints them.
        try await cluster.psql("CREATE TABLE t (id int, name text); INSERT INTO t VALUES (1, 'a'), (2, 'b')", database: firstName)
        #expect(try await cluster.psql("SELECT id, name FROM t ORDER BY id", database: firstName) == "1|a\n2|b")
        await #expect(throws: (any Error).self) { try await cluster.psql("SELECT * FROM t", database: "coffer_second") }
        #expect(try await cluster.psql("SHOW fsync") == "on")
        #expect(try await cluster.psql("SHOW synchronous_commit") == "on")

        let pid = try postmasterPID(directory)
        try await cluster.stop()
        await #expect(throws: (any Error).self) { try await cluster.psql("SELECT 1") }

        try await cluster.start()
        #expect(cluster.port == port)
        #expect(try await cluster.psql("SELECT count(*) FROM t", database: firstName) == "2")

        // A crash (immediate stop) keeps every committed row: recovery replays the WAL.
        try await cluster.psql("INSERT INTO t VALUES (3, 'c')", database: firstName)
        try await cluster.restart(mode: .immediate)
        #expect(try await cluster.psql("SELECT count(*) FROM t", database: firstName) == "3")

        let restartedPID = try postmasterPID(directory)
        #expect(restartedPID != pid)
        try cluster.destroy()
        #expect(!FileManager.default.fileExists(atPath: directory.path))
        #expect(!isRunning(restartedPID))
        await #expect(throws: (any Error).self) { try await cluster.psql("SELECT 1") }
        try cluster.destroy()
    }

    @Test("shared: one cluster for the whole process, a database each")
    func shared() async throws {
        let cluster = try await PostgresCluster.shared()
        #expect(try await PostgresCluster.shared() === cluster)
        let url = try await cluster.createDatabase()
        let name = String(try #require(URLComponents(string: url)).path.dropFirst())
        #expect(try await cluster.psql("SELECT current_database()", database: name) == name)
    }

    @Test("a cluster dropped without destroy() is stopped and removed")
    func deinitDestroys() async throws {
        var cluster: PostgresCluster? = try await PostgresCluster.start()
        let directory = try #require(cluster?.directory)
        let pid = try postmasterPID(directory)
        cluster = nil
        #expect(!FileManager.default.fileExists(atPath: directory.path))
        #expect(!isRunning(pid))
    }

    @Test("missing binaries, a bad URL: the error says how to fix it")
    func failuresSayWhatToDo() throws {
        let missing = #expect(throws: PostgresCluster.Failure.self) {
            try PostgresCluster.Binaries.find(root: "/nonexistent", path: "")
        }
        #expect(missing?.description.contains("apt-get install postgresql") == true)
        #expect(missing?.description.contains("COFFER_TEST_POSTGRES_URL=postgres://") == true)
        let url = #expect(throws: PostgresCluster.Failure.self) { try PostgresCluster.external(url: "mysql://localhost/x") }
        #expect(url?.description.contains("COFFER_TEST_POSTGRES_URL") == true)
    }

    /// Whether `pid` is a live process (a zombie that init has not reaped yet is not).
    func isRunning(_ pid: pid_t) -> Bool {
        guard kill(pid, 0) == 0 else { return false }
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else { return true }
        // "PID (COMMAND) STATE …": the state follows the last parenthesis.
        guard let close = stat.lastIndex(of: ")") else { return true }
        return stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).first != "Z"
    }

    /// The first line of `data/postmaster.pid`.
    func postmasterPID(_ directory: URL) throws -> pid_t {
        let text = try String(contentsOf: directory.appendingPathComponent("data/postmaster.pid"), encoding: .utf8)
        return try #require(pid_t(text.prefix { $0 != "\n" }))
    }
}
