import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A key file written once: readable by its owner only from its first byte, whole when it
/// appears, durable, and never replaced.
///
/// `FileManager.createFile` wrote the secret with the process's umask (0644 under the usual
/// 022) and set 0600 afterwards, flushed nothing, and replaced a file another process created
/// meanwhile: two instances sharing a fresh data directory (`coffer@1` and `coffer@2`
/// started together) each made a key, the second file replaced the first, and the first
/// instance went on with a key no file held — download tokens the other instance refused,
/// checkpoints signed by a key no auditor had.
enum SecretFile {
    /// Whether this call created `path` (false: it existed, or another process created it
    /// first — read it then). The bytes go to a temporary file of this process (0600,
    /// `O_EXCL`), flushed, then linked to `path` (`link` never replaces), and the directory
    /// flushed. On a file system without hard links (vfat, some network and FUSE mounts) the
    /// file is created in place with `O_EXCL` instead: never replaced, but a process starting
    /// at that very moment could read it half written (and stop with an error, not a key of
    /// its own).
    static func create(_ path: String, contents: Data) throws -> Bool {
        let directory = (path as NSString).deletingLastPathComponent
        removeLeftovers(of: path, in: directory)
        let temporary = path + ".\(UUID().uuidString).tmp"
        try write(temporary, contents)
        defer { unlink(temporary) }
        if link(temporary, path) != 0 {
            switch errno {
            case EEXIST: return false
            case EPERM, ENOTSUP, EOPNOTSUPP, EXDEV, ENOSYS:
                do { try write(path, contents) } catch let error as POSIXError where error.code == .EEXIST { return false }
            default: throw failure(errno, path)
            }
        }
        let fd = open(directory.isEmpty ? "." : directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if fd >= 0 {
            _ = fsync(fd)
            close(fd)
        }
        return true
    }

    /// Creates `path` (0600, never an existing file or a link), writes `contents` and flushes.
    private static func write(_ path: String, _ contents: Data) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else {
            if errno == EEXIST { throw POSIXError(.EEXIST) }
            throw failure(errno, path)
        }
        let file = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        do {
            try file.write(contentsOf: contents)
            try file.synchronize()
            try file.close()
        } catch {
            unlink(path)
            throw error
        }
    }

    /// Temporary files of `path` older than a minute: what a crash between the link and the
    /// unlink left (a second name of the key), or one before the link. Younger ones may be
    /// another process's, on its way.
    private static func removeLeftovers(of path: String, in directory: String) {
        let prefix = (path as NSString).lastPathComponent + "."
        let folder = directory.isEmpty ? "." : directory
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: folder) else { return }
        for name in names where name.hasPrefix(prefix) && name.hasSuffix(".tmp") {
            let leftover = folder + "/" + name
            var info = stat()
            guard lstat(leftover, &info) == 0, Date().timeIntervalSince1970 - Double(info.st_mtim.tv_sec) > 60 else { continue }
            unlink(leftover)
        }
    }

    static func failure(_ code: Int32, _ path: String) -> TokenKeyFile.KeyError {
        TokenKeyFile.KeyError(description: "cannot create \(path): \(String(cString: strerror(code)))")
    }
}
