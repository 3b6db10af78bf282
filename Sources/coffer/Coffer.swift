import ArgumentParser
import CofferStore
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// write(2) (IO's own `write` hides the C function's name).
private func systemWrite(_ fd: Int32, _ buffer: UnsafeRawPointer?, _ count: Int) -> Int {
    #if canImport(Glibc)
        Glibc.write(fd, buffer, count)
    #else
        Darwin.write(fd, buffer, count)
    #endif
}

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

    /// Writes a file atomically with the given permissions: a new file beside it, created with
    /// `mode` (so a key is never readable by others, not even for a moment, as it was while
    /// `Data.write(.atomic)` made the file with the umask's mode and it was changed after),
    /// flushed, then renamed over `path`.
    static func write(_ bytes: [UInt8], to path: String, mode: Int = 0o644) throws {
        let url = URL(fileURLWithPath: path)
        let temporary = url.deletingLastPathComponent().appendingPathComponent(".\(url.lastPathComponent).\(UUID().uuidString).tmp").path
        func failed(_ what: String) -> UsageError { UsageError("cannot write \(path): \(what): \(String(cString: strerror(errno)))") }
        // What is there is replaced, never written through: a device or a link (`--out /dev/stdout`)
        // would be replaced by a file. Standard output is the default (no --out).
        var existing = stat()
        if lstat(path, &existing) == 0, existing.st_mode & S_IFMT != S_IFREG {
            throw UsageError("cannot write \(path): it is not a regular file (leave out --out to write to standard output)")
        }
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode_t(mode))
        guard fd >= 0 else { throw failed("create") }
        var done = false
        defer {
            close(fd)
            if !done { unlink(temporary) }
        }
        // The umask may have taken bits away: the mode asked for, exactly.
        guard fchmod(fd, mode_t(mode)) == 0 else { throw failed("chmod") }
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { systemWrite(fd, $0.baseAddress, $0.count) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { throw failed("write") }
            offset += written
        }
        guard fsync(fd) == 0 else { throw failed("fsync") }
        guard rename(temporary, path) == 0 else { throw failed("rename") }
        done = true
        // The rename itself, flushed: after a power loss the file is there (or the old one is).
        let directory = open(url.deletingLastPathComponent().path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directory >= 0 {
            _ = fsync(directory)
            close(directory)
        }
    }

    /// The SQLite database at `path`, opened without migrating it (``CofferDatabase/init(currentPath:)``:
    /// a tool never migrates a database a server uses); a schema not exactly this binary's is a
    /// usage error naming the path.
    static func currentDatabase(_ path: String) throws -> CofferDatabase {
        do { return try CofferDatabase(currentPath: path) } catch let error as StoreError { throw UsageError("\(path): \(error)") }
    }

    /// Writes to `path` (`mode`), or to standard output when nil.
    static func output(_ bytes: [UInt8], to path: String?, mode: Int = 0o644) throws {
        if let path { try write(bytes, to: path, mode: mode) } else { FileHandle.standardOutput.write(Data(bytes)) }
    }

    static func date(_ text: String?, _ flag: String) throws -> Date? {
        guard let text else { return nil }
        guard let date = RFC3339Parsing.parse(text) else {
            throw UsageError("\(flag): '\(text)' is not an ISO 8601 date (e.g. 2024-02-23T17:27:16Z)")
        }
        return date
    }
}
