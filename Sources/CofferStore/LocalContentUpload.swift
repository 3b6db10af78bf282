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
    /// The bytes flushed to the disk so far (see ``flushEvery``).
    private var flushed: Int64 = 0
    /// An upload flushes its file every 8 MiB, not only at the end: the disk then never holds
    /// hundreds of MB of it to write at once, which a ledger's fsync waited behind.
    static let flushEvery: Int64 = 8 << 20

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
            store.beforeFileIO?(.write)
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
        if size - flushed >= Self.flushEvery {
            store.beforeFileIO?(.flush)
            guard flushData(descriptor) == 0 else {
                let message = Self.errnoText()
                abort()
                throw ContentStoreError.io("cannot flush \(temporaryPath): \(message)")
            }
            flushed = size
        }
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
        let digest = hasher.finalize().hexString
        if let expected = expectedSHA256, expected.lowercased() != digest {
            abort()
            throw ContentStoreError.digestMismatch
        }
        store.beforeFileIO?(.sync)
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
        // Also over the same bytes already stored: an atomic replace whose time is now, so
        // `coffer content gc` sees it as new (its catalogue entry is about to be written) —
        // a touch of the old file could land between gc's check of its time and its removal.
        // Its time is now (not its last write's): what gc compares.
        utimes(temporaryPath, nil)
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
}

/// `fdatasync(2)`: the file's bytes (and its size), not its other metadata. Darwin does not
/// declare it: `fsync` there.
private func flushData(_ fd: Int32) -> Int32 {
    #if canImport(Darwin)
        fsync(fd)
    #else
        fdatasync(fd)
    #endif
}

/// POSIX `write(2)`, named apart from ``ContentStore/write(_:maxBytes:expectedSHA256:)``.
private func posixWrite(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int) -> Int {
    write(fd, buffer, count)
}
