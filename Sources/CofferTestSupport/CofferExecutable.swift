import Foundation
import Synchronization

/// The built `coffer` executable, run the way scripts and operators run it. Test targets that
/// use it depend on the `coffer` target, so `swift test` builds it first.
///
///     let run = try CofferExecutable.run(["ledger", "verify", "--data-dir", path])
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
    /// `timeout`: the process is killed (SIGKILL) once it has run this long — for a command
    /// expected to refuse and exit (a `serve` that should not start), so that a regression
    /// fails the test instead of hanging it.
    public static func run(_ arguments: [String], stdin: Data? = nil, environment: [String: String]? = nil, timeout: Duration? = nil) throws -> Run {
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
        if let timeout {
            let pid = process.processIdentifier
            let seconds = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
            DispatchQueue.global().asyncAfter(deadline: .now() + seconds) {
                reaped.withLock { if !$0 { kill(pid, SIGKILL) } }
            }
        }
        if let stdin { input.fileHandleForWriting.write(stdin) }
        try input.fileHandleForWriting.close()
        let stdout = out.fileHandleForReading.readDataToEndOfFile()
        let stderr = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        reaped.withLock { $0 = true }
        return Run(
            status: process.terminationStatus, stdout: String(decoding: stdout, as: UTF8.self), stderr: String(decoding: stderr, as: UTF8.self))
    }
}
