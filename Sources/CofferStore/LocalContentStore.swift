import CofferCore
import Crypto
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Content-addressed blob storage: each object is stored once under its lower-case hex SHA-256,
/// at `root/objects/ab/cdef…` (the first two hex characters name a folder).
///
/// Objects are written to `root/tmp`, fsynced, then renamed into place, so a crash never leaves a
/// partial object visible; leftovers in `root/tmp` are removed by ``cleanTemporaryFiles()``.
public struct LocalContentStore: ContentStore {
    /// The root directory.
    public let root: String
    let objectsDirectory: String
    let temporaryDirectory: String

    /// Opens the store at `root`, creating `root`, `root/objects` and `root/tmp` (mode 0700) if needed.
    public init(root: String) throws {
        self.root = root
        objectsDirectory = root + "/objects"
        temporaryDirectory = root + "/tmp"
        for directory in [root, objectsDirectory, temporaryDirectory] {
            do {
                try FileManager.default.createDirectory(
                    atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch {
                throw ContentStoreError.io("cannot create \(directory): \(error)")
            }
        }
    }

    /// Starts writing a new object of at most `maxBytes` bytes.
    public func makeWriter(maxBytes: Int64) throws -> LocalContentUpload {
        try LocalContentUpload(store: self, maxBytes: maxBytes)
    }

    public func makeUpload(maxBytes: Int64) throws -> any ContentUpload { try makeWriter(maxBytes: maxBytes) }

    public func size(sha256: String) throws -> Int64? {
        guard let path = path(sha256: sha256) else { return nil }
        do {
            return (try FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.int64Value
        } catch {
            throw ContentStoreError.io("cannot stat \(path): \(error)")
        }
    }

    public func localFile(sha256: String) -> LocalContentFile? {
        guard let path = path(sha256: sha256), let relative = relativePath(sha256: sha256) else { return nil }
        return LocalContentFile(path: path, relativePath: relative)
    }

    /// Reads the range in 512 KiB chunks on a detached task. The server streams local files
    /// through its own file streamer (``localFile(sha256:)``); this is for other readers.
    public func read(sha256: String, range: ClosedRange<Int64>) -> AsyncThrowingStream<[UInt8], any Error> {
        let path = path(sha256: sha256)
        return AsyncThrowingStream { continuation in
            let task = Task.detached {
                do {
                    guard let path, let handle = FileHandle(forReadingAtPath: path) else {
                        throw ContentStoreError.io("no object \(sha256.prefix(64))")
                    }
                    defer { try? handle.close() }
                    try handle.seek(toOffset: UInt64(range.lowerBound))
                    var remaining = range.upperBound - range.lowerBound + 1
                    while remaining > 0, !Task.isCancelled {
                        let chunk = try handle.read(upToCount: Int(min(remaining, 512 * 1024))) ?? Data()
                        guard !chunk.isEmpty else { throw ContentStoreError.io("\(path) ended before the range did") }
                        remaining -= Int64(chunk.count)
                        continuation.yield(Array(chunk))
                    }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// The path of the object with this digest, or nil when `sha256` is not exactly 64
    /// lower-case hex characters or no such object exists.
    public func path(sha256: String) -> String? {
        guard Self.isContentAddress(sha256) else { return nil }
        let path = objectPath(sha256)
        return FileManager.default.fileExists(atPath: path) ? path : nil
    }

    /// The object's path relative to the store's root (`objects/ab/cdef…`), for a web server
    /// that serves the store's directory itself (X-Accel-Redirect); nil for a malformed digest.
    public func relativePath(sha256: String) -> String? {
        guard Self.isContentAddress(sha256) else { return nil }
        return "objects/" + sha256.prefix(2) + "/" + sha256.dropFirst(2)
    }

    /// Deletes everything left in `root/tmp` (writes interrupted by a crash) and returns how many
    /// entries were removed. Call it at start-up, before any writer exists.
    @discardableResult
    public func cleanTemporaryFiles() throws -> Int {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: temporaryDirectory)
        } catch {
            throw ContentStoreError.io("cannot list \(temporaryDirectory): \(error)")
        }
        var removed = 0
        for name in names {
            do {
                try FileManager.default.removeItem(atPath: temporaryDirectory + "/" + name)
                removed += 1
            } catch {
                throw ContentStoreError.io("cannot remove \(name) from \(temporaryDirectory): \(error)")
            }
        }
        return removed
    }

    /// `objects/ab` for digest `ab…`; `digest` must be valid.
    func shardDirectory(_ digest: String) -> String {
        objectsDirectory + "/" + digest.prefix(2)
    }

    /// `objects/ab/cdef…` for digest `abcdef…`; `digest` must be valid.
    func objectPath(_ digest: String) -> String {
        shardDirectory(digest) + "/" + digest.dropFirst(2)
    }
}

/// Writes one object incrementally: bytes go to a private temporary file while being hashed; ``finish(expectedSHA256:)``
/// makes the object durable and visible, ``abort()`` discards it.
///
/// Use a writer from one task at a time. A writer dropped without `finish` or `abort` deletes its temporary file.
public final class LocalContentUpload: ContentUpload {
    private let store: LocalContentStore
    private let maxBytes: Int64
    private let temporaryPath: String
    private var descriptor: Int32
    private var hasher = SHA256()
    /// The number of bytes appended so far.
    public private(set) var size: Int64 = 0

    init(store: LocalContentStore, maxBytes: Int64) throws {
        self.store = store
        self.maxBytes = maxBytes
        temporaryPath = store.temporaryDirectory + "/" + UUID().uuidString.lowercased() + ".part"
        descriptor = open(temporaryPath, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw ContentStoreError.io("cannot create \(temporaryPath): \(Self.errnoText())") }
    }

    deinit {
        if descriptor >= 0 {
            close(descriptor)
            unlink(temporaryPath)
        }
    }

    /// Appends bytes. Throws ``ContentStoreError/tooLarge`` (and discards the object) when the total would exceed `maxBytes`.
    public func append(_ bytes: UnsafeRawBufferPointer) throws {
        guard descriptor >= 0 else { throw ContentStoreError.io("writer is closed") }
        guard Int64(bytes.count) <= maxBytes - size else {
            abort()
            throw ContentStoreError.tooLarge
        }
        var offset = 0
        while offset < bytes.count {
            guard let base = bytes.baseAddress else { break }
            let written = posixWrite(descriptor, base + offset, bytes.count - offset)
            if written < 0 {
                if errno == EINTR { continue }
                let message = Self.errnoText()
                abort()
                throw ContentStoreError.io("cannot write \(temporaryPath): \(message)")
            }
            offset += written
        }
        hasher.update(bufferPointer: bytes)
        size += Int64(bytes.count)
    }

    /// Appends bytes (see ``append(_:)-(UnsafeRawBufferPointer)``).
    public func append(_ bytes: some Collection<UInt8>) throws {
        if let done: Void = try bytes.withContiguousStorageIfAvailable({ try append(UnsafeRawBufferPointer($0)) }) {
            return done
        }
        try Array(bytes).withUnsafeBytes { try append($0) }
    }

    /// Checks the digest, fsyncs the file, renames it to its content address (or drops it when the object
    /// already exists) and fsyncs the directory. Returns the lower-case hex SHA-256 and the size.
    ///
    /// Throws ``ContentStoreError/digestMismatch`` (and discards the object) when `expectedSHA256` is given and
    /// differs (compared case-insensitively).
    public func finish(expectedSHA256: String?) throws -> (sha256: String, size: Int64) {
        guard descriptor >= 0 else { throw ContentStoreError.io("writer is closed") }
        let digest = Self.hex(hasher.finalize())
        if let expected = expectedSHA256, expected.lowercased() != digest {
            abort()
            throw ContentStoreError.digestMismatch
        }
        guard fsync(descriptor) == 0 else {
            let message = Self.errnoText()
            abort()
            throw ContentStoreError.io("cannot fsync \(temporaryPath): \(message)")
        }
        let closed = close(descriptor)
        descriptor = -1
        guard closed == 0 else {
            let message = Self.errnoText()
            unlink(temporaryPath)
            throw ContentStoreError.io("cannot close \(temporaryPath): \(message)")
        }
        do {
            try install(digest)
        } catch {
            unlink(temporaryPath)
            throw error
        }
        return (digest, size)
    }

    /// Discards the object: closes and deletes the temporary file. Safe to call more than once.
    public func abort() {
        guard descriptor >= 0 else { return }
        close(descriptor)
        descriptor = -1
        unlink(temporaryPath)
    }

    /// Moves the closed, synced temporary file to the object path of `digest`.
    private func install(_ digest: String) throws {
        let shard = store.shardDirectory(digest)
        var createdShard = false
        if mkdir(shard, 0o700) == 0 {
            createdShard = true
        } else if errno != EEXIST {
            throw ContentStoreError.io("cannot create \(shard): \(Self.errnoText())")
        }
        if createdShard {
            try Self.syncDirectory(store.objectsDirectory)
        }
        let objectPath = store.objectPath(digest)
        if access(objectPath, F_OK) == 0 {
            // Same bytes already stored: keep the existing object.
            unlink(temporaryPath)
            return
        }
        guard rename(temporaryPath, objectPath) == 0 else {
            throw ContentStoreError.io("cannot rename into \(objectPath): \(Self.errnoText())")
        }
        try Self.syncDirectory(shard)
    }

    /// fsyncs a directory so a rename or creation inside it is durable.
    private static func syncDirectory(_ path: String) throws {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw ContentStoreError.io("cannot open \(path): \(errnoText())") }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw ContentStoreError.io("cannot fsync \(path): \(errnoText())") }
    }

    private static func errnoText() -> String {
        String(cString: strerror(errno))
    }

    private static func hex(_ digest: SHA256.Digest) -> String {
        let alphabet = Array("0123456789abcdef".utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(64)
        for byte in digest {
            bytes.append(alphabet[Int(byte >> 4)])
            bytes.append(alphabet[Int(byte & 0x0f)])
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// POSIX `write(2)`, named apart from ``ContentStore/write(_:maxBytes:expectedSHA256:)``.
private func posixWrite(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int) -> Int {
    write(fd, buffer, count)
}
