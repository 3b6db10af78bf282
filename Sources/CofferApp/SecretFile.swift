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
    /// `O_EXCL`), flushed, then linked to `path` (`link` never replaces), and the directory flushed.
    static func create(_ path: String, contents: Data) throws -> Bool {
        let temporary = path + ".\(UUID().uuidString).tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw failure(errno, temporary) }
        defer { unlink(temporary) }
        let file = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        try file.write(contentsOf: contents)
        try file.synchronize()
        try file.close()
        guard link(temporary, path) == 0 else {
            if errno == EEXIST { return false }
            throw failure(errno, path)
        }
        let directory = open((path as NSString).deletingLastPathComponent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directory >= 0 {
            _ = fsync(directory)
            close(directory)
        }
        return true
    }

    static func failure(_ code: Int32, _ path: String) -> TokenKeyFile.KeyError {
        TokenKeyFile.KeyError(description: "cannot create \(path): \(String(cString: strerror(code)))")
    }
}
