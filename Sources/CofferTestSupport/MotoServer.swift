import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A real S3-protocol server for tests: moto's standalone `moto_server` (PyPI
/// `moto[server]`), started by `scripts/moto-server.py` on a free port of 127.0.0.1 with
/// request authentication on — every request must carry a valid Signature Version 4 of
/// ``accessKeyId``/``secretAccessKey`` (an IAM user allowed `s3:*`).
///
///     let moto = try await MotoServer.shared()
///     let bucket = try moto.createBucket()      // a fresh bucket per test
///
/// The Python is `COFFER_TEST_MOTO_PYTHON`, else `.build-venv/bin/python3` (`.ci/run` makes
/// it); without moto the tests fail, saying how to install it — never skip. The server stops
/// when the test process ends, however it ended (the script watches this process).
public final class MotoServer: Sendable {
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
        public init(_ description: String) { self.description = description }
    }

    /// `http://127.0.0.1:PORT`
    public let endpoint: String
    public let accessKeyId: String
    public let secretAccessKey: String
    private let launcher: pid_t

    public static let pythonVariable = "COFFER_TEST_MOTO_PYTHON"

    private init(endpoint: String, accessKeyId: String, secretAccessKey: String, launcher: pid_t) {
        self.endpoint = endpoint
        self.accessKeyId = accessKeyId
        self.secretAccessKey = secretAccessKey
        self.launcher = launcher
    }

    /// The environment a `coffer` process needs to use this server's buckets.
    public var environment: [String: String] { ["AWS_ACCESS_KEY_ID": accessKeyId, "AWS_SECRET_ACCESS_KEY": secretAccessKey] }

    /// Stops the server (SIGTERM to the launcher script, which stops moto_server).
    public func stop() {
        kill(launcher, SIGTERM)
        ChildProcess.wait(launcher)
    }

    private static let sharedServers = Mutex<[Bool: Result<MotoServer, any Error>]>([:])

    /// The server the tests of this process share, started on the first call; a failure is
    /// kept. `authenticating: false` gives a server that checks no signature: the only kind on
    /// which presigned URLs work, because moto 5 answers 500 to query authentication when
    /// authentication is on (botocore checks our presigned signatures instead).
    /// Waits on a thread of its own (``offThePool(_:)``): the first call takes seconds, and
    /// the others wait for it.
    public static func shared(authenticating: Bool = true) async throws -> MotoServer {
        try await offThePool { try sharedBlocking(authenticating: authenticating) }
    }

    private static func sharedBlocking(authenticating: Bool) throws -> MotoServer {
        try sharedServers.withLock { servers in
            if let existing = servers[authenticating] { return try existing.get() }
            let result = Result { try startBlocking(authenticating: authenticating) }
            servers[authenticating] = result
            return try result.get()
        }
    }

    /// Starts a new server (about 2–5 s, on a thread of its own).
    public static func start(authenticating: Bool = true) async throws -> MotoServer {
        try await offThePool { try startBlocking(authenticating: authenticating) }
    }

    private static func startBlocking(authenticating: Bool) throws -> MotoServer {
        let python = try findPython()
        let directory = try makeTemporaryDirectory(prefix: "coffer-moto")
        defer { try? FileManager.default.removeItem(at: directory) }
        let info = directory.appendingPathComponent("moto.json")
        let pid = try ChildProcess.start(
            python, [script] + (authenticating ? [] : ["--no-auth"]) + [info.path, String(getpid())], environment: ProcessInfo.processInfo.environment
        )
        let deadline = ContinuousClock.now + .seconds(90)
        while ContinuousClock.now < deadline {
            if let data = FileManager.default.contents(atPath: info.path) {
                guard let fields = try? JSONSerialization.jsonObject(with: data) as? [String: Any], let endpoint = fields["endpoint"] as? String,
                    let key = fields["accessKeyId"] as? String, let secret = fields["secretAccessKey"] as? String
                else {
                    kill(pid, SIGTERM)
                    ChildProcess.wait(pid)
                    throw Failure("moto-server.py wrote an unreadable \(info.path)")
                }
                return MotoServer(endpoint: endpoint, accessKeyId: key, secretAccessKey: secret, launcher: pid)
            }
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid {
                throw Failure("moto-server.py ended before the server was ready (status \(status)): is moto[server] installed for \(python)?")
            }
            usleep(100_000)
        }
        kill(pid, SIGTERM)
        ChildProcess.wait(pid)
        throw Failure("moto-server.py did not report a running server within 90 s")
    }

    /// The repository's `scripts/moto-server.py`.
    static var script: String {
        repository.appendingPathComponent("scripts/moto-server.py").path
    }

    static var repository: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }

    static func findPython() throws -> String {
        if let configured = ProcessInfo.processInfo.environment[pythonVariable] { return configured }
        let venv = repository.appendingPathComponent(".build-venv/bin/python3").path
        let server = repository.appendingPathComponent(".build-venv/bin/moto_server").path
        guard FileManager.default.isExecutableFile(atPath: venv), FileManager.default.isExecutableFile(atPath: server) else {
            throw Failure(
                "moto is needed for the object-store tests: python3 -m venv .build-venv && .build-venv/bin/pip install 'moto[server]' (or set \(pythonVariable))"
            )
        }
        return venv
    }

    /// A bucket name no other test uses.
    public static func uniqueBucketName() -> String {
        "coffer-test-" + UUID().uuidString.lowercased().prefix(18)
    }
}
