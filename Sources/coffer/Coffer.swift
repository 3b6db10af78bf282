import ArgumentParser
import Foundation

@main
struct Coffer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "coffer",
        abstract: "A server-side vault for paid game content, released only for fresh, verified App Store receipts.",
        version: "0.1.0",
        subcommands: [
            ServeCommand.self, MigrateCommand.self, KeysCommand.self, LedgerCommand.self, ReceiptCommand.self, SandboxCommand.self, BenchCommand.self,
            ContentCommand.self, AdminCommand.self, AuditCommand.self,
        ])

    /// Like ArgumentParser's `main()`, but usage and I/O errors exit with status 2
    /// (not 64), so scripts can tell them from an "invalid" verdict (1).
    static func main() async {
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch let exit as ExitCode {
            Foundation.exit(exit.rawValue)
        } catch {
            if exitCode(for: error) == .success { self.exit(withError: error) }  // --help, --version
            FileHandle.standardError.write(Data(("coffer: " + fullMessage(for: error) + "\n").utf8))
            Foundation.exit(2)
        }
    }
}

/// A failure the user can fix (bad flag value, unreadable file): exit code 2.
struct UsageError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

enum IO {
    static func read(_ path: String) throws -> [UInt8] {
        if path == "-" { return [UInt8](FileHandle.standardInput.readDataToEndOfFile()) }
        guard let data = FileManager.default.contents(atPath: path) else { throw UsageError("cannot read \(path)") }
        return [UInt8](data)
    }

    /// Writes a file atomically with the given permissions.
    static func write(_ bytes: [UInt8], to path: String, mode: Int = 0o644) throws {
        let url = URL(fileURLWithPath: path)
        do {
            try Data(bytes).write(to: url, options: .atomic)
            try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path)
        } catch {
            throw UsageError("cannot write \(path): \(error.localizedDescription)")
        }
    }

    /// Writes to `path`, or to standard output when nil.
    static func output(_ bytes: [UInt8], to path: String?) throws {
        if let path { try write(bytes, to: path) } else { FileHandle.standardOutput.write(Data(bytes)) }
    }

    static func date(_ text: String?, _ flag: String) throws -> Date? {
        guard let text else { return nil }
        guard let date = RFC3339Parsing.parse(text) else {
            throw UsageError("\(flag): '\(text)' is not an ISO 8601 date (e.g. 2024-02-23T17:27:16Z)")
        }
        return date
    }
}
