import Foundation
import Synchronization

/// The built `coffer` executable, run the way scripts and operators run it. Test targets that
/// use it depend on the `coffer` target, so `swift test` builds it first.
///
///     let run = try await CofferExecutable.run(["ledger", "verify", "--data-dir", path])
///     #expect(run.status == 0, "\(run.stderr)")
public enum CofferExecutable {
    /// The binary was not found beside the test bundle.
    public struct NotFound: Error, CustomStringConvertible {
        public var searched: [String]
        public var description: String { "the coffer executable is not built (searched \(searched.joined(separator: ", "))): run swift build" }
    }

    /// What a run printed and how it ended.
    public struct Run: Sendable {
        public var status: Int32
        public var stdout: String
        public var stderr: String
    }

    /// `coffer` in the build products directory: beside the test bundle, or up to three
    /// directories above it (a bundle's executable sits inside the bundle).
    public static var url: URL {
        get throws {
            var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            var searched: [String] = []
            for _ in 0..<4 {
                let candidate = directory.appendingPathComponent("coffer")
                if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
                searched.append(directory.path)
                directory = directory.deletingLastPathComponent()
            }
            throw NotFound(searched: searched)
        }
    }

    /// Runs `coffer arguments`, writes `stdin` (if any) and closes it, and waits for the exit.
    /// `environment` nil inherits this process's environment.
    /// `timeout`: the process is killed (SIGKILL) once it has run this long — shortened for a
    /// command expected to refuse and exit (a `serve` that should not start) — so that a
    /// regression fails its test (status 9 by signal) instead of hanging the whole run until
    /// CI's limit. Every command has one: 10 minutes unless given.
    ///
    /// The command runs on a thread of its own (``offThePool(_:)``): it may talk to a server
    /// in this very process, whose tasks need the cooperative pool's threads.
    public static func run(
        _ arguments: [String], stdin: Data? = nil, environment: [String: String]? = nil, timeout: Duration = .seconds(600)
    ) async throws -> Run {
        try await offThePool { try runBlocking(arguments, stdin: stdin, environment: environment, timeout: timeout) }
    }

    private static func runBlocking(_ arguments: [String], stdin: Data?, environment: [String: String]?, timeout: Duration) throws -> Run {
        let process = Process()
        process.executableURL = try url
        process.arguments = arguments
        if let environment { process.environment = environment }
        let out = Pipe()
        let err = Pipe()
        let input = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = input
        try process.run()
        // Killed only while not yet reaped (its pid could be another process's later; the
        // moment between the reaping and the flag is too short for the pid to come round).
        let reaped = Mutex(false)
        let pid = process.processIdentifier
        let seconds = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds) {
            reaped.withLock { if !$0 { kill(pid, SIGKILL) } }
        }
        // stderr is read on a thread of its own while stdout is read here: read one after the
        // other, a command that fills the pipe of the one not yet read (64 KiB) would wait for
        // us forever, and we for it.
        let stderrRead = Mutex(Data())
        let stderrDone = DispatchSemaphore(value: 0)
        let errors = err.fileHandleForReading
        Thread {
            let data = errors.readDataToEndOfFile()
            stderrRead.withLock { $0 = data }
            stderrDone.signal()
        }.start()
        if let stdin { input.fileHandleForWriting.write(stdin) }
        try input.fileHandleForWriting.close()
        let stdout = out.fileHandleForReading.readDataToEndOfFile()
        stderrDone.wait()
        let stderr = stderrRead.withLock { $0 }
        process.waitUntilExit()
        reaped.withLock { $0 = true }
        return Run(
            status: process.terminationStatus, stdout: String(decoding: stdout, as: UTF8.self), stderr: String(decoding: stderr, as: UTF8.self))
    }
}
