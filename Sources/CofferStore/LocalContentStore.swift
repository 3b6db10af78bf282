import CofferCore
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
    /// Called before each write(2), flush and fsync(2) of an object's file (a test's probe of
    /// where they run).
    var beforeFileIO: (@Sendable (FileIO) -> Void)?

    /// What ``beforeFileIO`` is called before.
    enum FileIO: Sendable, Hashable {
        case write, flush, sync
    }

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

    /// A writer whose hashing, writes and fsyncs run on ``FileWriteThreads``, never on the
    /// calling task's thread.
    public func makeUpload(maxBytes: Int64, expectedSHA256: String?) throws -> any ContentUpload {
        PooledContentUpload(try makeWriter(maxBytes: maxBytes), maxBytes: maxBytes)
    }

    /// A directory hands out no URLs: downloads stream, or nginx sends the file (X-Accel-Redirect).
    public func presignedURL(sha256: String, expires: Int, contentType: String, fileName: String, now: Date) -> String? { nil }

    /// Every `objects/ab/cdef…` file whose name is a content address.
    public func objects() throws -> [StoredObject] {
        var found: [StoredObject] = []
        let shards: [String]
        do { shards = try FileManager.default.contentsOfDirectory(atPath: objectsDirectory) } catch {
            throw ContentStoreError.io("cannot list \(objectsDirectory): \(error)")
        }
        for shard in shards.sorted() where shard.utf8.count == 2 {
            // An unreadable shard is an error, never a shorter list: migrate would call itself done.
            let names: [String]
            do { names = try FileManager.default.contentsOfDirectory(atPath: objectsDirectory + "/" + shard) } catch {
                throw ContentStoreError.io("cannot list \(objectsDirectory)/\(shard): \(error)")
            }
            for name in names.sorted() {
                let digest = shard + name
                guard Self.isContentAddress(digest), let (size, modified) = try attributes(digest) else { continue }
                found.append(StoredObject(sha256: digest, size: size, modified: modified))
            }
        }
        return found
    }

    /// The object's size and modification time; nil when it is gone (removed since it was listed).
    private func attributes(_ digest: String) throws -> (Int64, Date?)? {
        let path = objectPath(digest)
        do {
            let attributes = try FileManager.default.attributesOfItem(atPath: path)
            guard let size = (attributes[.size] as? NSNumber)?.int64Value else { throw ContentStoreError.io("no size for \(path)") }
            return (size, attributes[.modificationDate] as? Date)
        } catch {
            guard FileManager.default.fileExists(atPath: path) else { return nil }
            throw ContentStoreError.io("cannot stat \(path): \(error)")
        }
    }

    /// Removes the object's file (nothing when there is none).
    public func delete(sha256: String) throws {
        guard Self.isContentAddress(sha256) else { return }
        guard unlink(objectPath(sha256)) == 0 || errno == ENOENT else {
            throw ContentStoreError.io("cannot remove \(objectPath(sha256)): \(String(cString: strerror(errno)))")
        }
    }

    /// Removes the file unless its modification time is after `cutoff`: a finished upload of the
    /// same bytes renames a fresh file over it, whenever it finishes. A time checked and then an
    /// unlink would remove one that finished in between (its catalogue row then names an object
    /// gone), so the object is first moved aside — atomically, whatever is at its path then —
    /// and its time checked again there: a fresh one goes back.
    public func delete(sha256: String, ifNotModifiedAfter cutoff: Date) throws -> Bool {
        try delete(sha256: sha256, ifNotModifiedAfter: cutoff, beforeSettingAside: {})
    }

    /// ``delete(sha256:ifNotModifiedAfter:)`` with `beforeSettingAside` run between the first
    /// check and the move (a test's upload, finishing there).
    func delete(sha256: String, ifNotModifiedAfter cutoff: Date, beforeSettingAside: () throws -> Void) throws -> Bool {
        guard Self.isContentAddress(sha256), let (_, modified) = try attributes(sha256), let modified, modified <= cutoff else { return false }
        try beforeSettingAside()
        let path = objectPath(sha256)
        // Named by its digest: a gc that dies before its last step leaves what the next start
        // puts back (``cleanTemporaryFiles(olderThan:)``), never an object no one can find.
        let aside = temporaryDirectory + "/" + Self.asidePrefix + sha256 + "-" + UUID().uuidString
        guard rename(path, aside) == 0 else {
            if errno == ENOENT { return false }
            throw ContentStoreError.io("cannot move \(path) aside: \(String(cString: strerror(errno)))")
        }
        var info = stat()
        guard stat(aside, &info) == 0 else {
            // ENOENT: a start's cleanup put it back already.
            if errno == ENOENT { return false }
            throw ContentStoreError.io("cannot stat \(aside): \(String(cString: strerror(errno)))")
        }
        let movedModified = Date(timeIntervalSince1970: Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9)
        if movedModified > cutoff {
            // An upload finished in between: its object goes back (over any later upload of the same bytes).
            // ENOENT: a start's cleanup put it back already.
            guard Foundation.rename(aside, path) == 0 || errno == ENOENT else {
                throw ContentStoreError.io("cannot put \(path) back from \(aside): \(String(cString: strerror(errno)))")
            }
            return false
        }
        guard unlink(aside) == 0 || errno == ENOENT else { throw ContentStoreError.io("cannot remove \(aside): \(String(cString: strerror(errno)))") }
        return true
    }

    /// Partial uploads in `root/tmp` older than `olderThan` seconds (see ``cleanTemporaryFiles(olderThan:)``).
    public func removeAbandonedUploads(olderThan: TimeInterval) throws -> Int {
        try cleanTemporaryFiles(olderThan: olderThan)
    }

    /// One `stat(2)`: every download asks, so no separate existence check and no FileManager
    /// attribute dictionary. Nil for a missing object or anything but a regular file.
    public func size(sha256: String) throws -> Int64? {
        guard Self.isContentAddress(sha256) else { return nil }
        let path = objectPath(sha256)
        var info = stat()
        guard stat(path, &info) == 0 else {
            if errno == ENOENT || errno == ENOTDIR { return nil }
            throw ContentStoreError.io("cannot stat \(path): \(String(cString: strerror(errno)))")
        }
        guard info.st_mode & S_IFMT == S_IFREG else { return nil }
        return Int64(info.st_size)
    }

    /// Every object is a file here: its path (whether it exists is ``size(sha256:)``'s answer).
    public func localFile(sha256: String) -> LocalContentFile? {
        guard Self.isContentAddress(sha256), let relative = relativePath(sha256: sha256) else { return nil }
        return LocalContentFile(path: objectPath(sha256), relativePath: relative)
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
    ///
    /// `olderThan` keeps files modified more recently than that many seconds ago: when several
    /// instances share the directory, a younger file may be another instance's upload in progress.
    public func cleanTemporaryFiles(olderThan: TimeInterval = 0) throws -> Int {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: temporaryDirectory)
        } catch {
            throw ContentStoreError.io("cannot list \(temporaryDirectory): \(error)")
        }
        var removed = 0
        let cutoff = Date().addingTimeInterval(-olderThan)
        for name in names {
            // An object gc set aside and did not finish with: back in place, never over one
            // there (a link fails on an existing name, where a rename would replace a fresh
            // upload); where one is there, the copy set aside goes below.
            if name.hasPrefix(Self.asidePrefix) {
                let digest = String(name.dropFirst(Self.asidePrefix.count).prefix(64))
                let aside = temporaryDirectory + "/" + name
                if Self.isContentAddress(digest) {
                    guard link(aside, objectPath(digest)) != 0 else {
                        unlink(aside)
                        continue
                    }
                    guard errno == EEXIST || errno == ENOENT else {
                        throw ContentStoreError.io("cannot put \(objectPath(digest)) back from \(aside): \(String(cString: strerror(errno)))")
                    }
                }
            }
            if olderThan > 0,
                let modified = try? FileManager.default.attributesOfItem(atPath: temporaryDirectory + "/" + name)[.modificationDate] as? Date,
                modified > cutoff
            {
                continue
            }
            do {
                try FileManager.default.removeItem(atPath: temporaryDirectory + "/" + name)
                removed += 1
            } catch {
                throw ContentStoreError.io("cannot remove \(name) from \(temporaryDirectory): \(error)")
            }
        }
        return removed
    }

    /// What an object gc set aside in `root/tmp` is named: this, its digest, `-`, a UUID.
    static let asidePrefix = "gc-"

    /// `objects/ab` for digest `ab…`; `digest` must be valid.
    func shardDirectory(_ digest: String) -> String {
        objectsDirectory + "/" + digest.prefix(2)
    }

    /// `objects/ab/cdef…` for digest `abcdef…`; `digest` must be valid.
    func objectPath(_ digest: String) -> String {
        shardDirectory(digest) + "/" + digest.dropFirst(2)
    }
}
