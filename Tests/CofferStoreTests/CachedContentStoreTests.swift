import CofferCore
import CofferTestSupport
import Crypto
import Foundation
import Logging
import Synchronization
import Testing

@testable import CofferStore

#if canImport(Glibc)
    import Glibc
#endif

/// The object store's read-through cache: what it keeps is exactly the object its address
/// names, hits never reach the remote, and its budget is kept without removing what is in use.
@Suite("CachedContentStore")
struct CachedContentStoreTests {
    /// A remote store that counts the reads reaching it and can be told to send other bytes
    /// than an object's (a store that lies or was tampered with).
    final class Remote: ContentStore {
        let base = InMemoryContentStore(chunkSize: 4096)
        private let counts = Mutex((sizes: 0, opens: 0))
        let lying = Mutex<Set<String>>([])
        var sizes: Int { counts.withLock { $0.sizes } }
        var opens: Int { counts.withLock { $0.opens } }

        func put(_ bytes: [UInt8]) async throws -> String {
            try await base.write(
                AsyncStream {
                    $0.yield(bytes); $0.finish()
                }, maxBytes: Int64(bytes.count), expectedSHA256: nil
            ).sha256
        }

        func makeUpload(maxBytes: Int64, expectedSHA256: String?) async throws -> any ContentUpload {
            base.makeUpload(maxBytes: maxBytes, expectedSHA256: expectedSHA256)
        }
        func size(sha256: String) async throws -> Int64? {
            counts.withLock { $0.sizes += 1 }
            return base.size(sha256: sha256)
        }
        func read(sha256: String, range: ClosedRange<Int64>) -> AsyncThrowingStream<[UInt8], any Error> {
            counts.withLock { $0.opens += 1 }
            let stream = base.read(sha256: sha256, range: range)
            guard lying.withLock({ $0.contains(sha256) }) else { return stream }
            return AsyncThrowingStream { continuation in
                Task {
                    do {
                        for try await chunk in stream { continuation.yield(chunk.map { $0 ^ 0x5a }) }
                        continuation.finish()
                    } catch {
                        continuation.finish(throwing: error)
                    }
                }
            }
        }
        func localFile(sha256: String) -> LocalContentFile? { nil }
        func presignedURL(sha256: String, expires: Int, contentType: String, fileName: String, now: Date) -> String? { nil }
        func objects() async throws -> [StoredObject] { base.objects() }
        func delete(sha256: String) async throws { base.delete(sha256: sha256) }
        func delete(sha256: String, ifNotModifiedAfter cutoff: Date) async throws -> Bool {
            base.delete(sha256: sha256)
            return true
        }
        func removeAbandonedUploads(olderThan: TimeInterval) async throws -> Int { 0 }
    }

    static func bytes(_ count: Int, seed: UInt64) -> [UInt8] {
        var rng = SplitMix64(state: seed)
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &rng) }
    }

    static func drain(_ stream: AsyncThrowingStream<[UInt8], any Error>?) async throws -> [UInt8] {
        var out: [UInt8] = []
        for try await chunk in try #require(stream) { out += chunk }
        return out
    }

    /// Waits (60 s at most: a fill fsyncs, and the whole suite loads the disk) until
    /// `condition` holds: fills run in the background.
    static func until(_ what: String, _ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            if condition() { return }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("never: \(what)")
    }

    /// A clock the test moves: uses and evictions never depend on how fast the machine is.
    final class TestClock: Sendable {
        private let now = Mutex(Date(timeIntervalSince1970: 1_800_000_000))
        func read() -> Date { now.withLock { $0 } }
        func advance(_ seconds: TimeInterval) { now.withLock { $0 += seconds } }
    }

    static func withCache<T>(
        budget: Int64 = 1 << 20, clock: TestClock = TestClock(), _ body: (CachedContentStore, Remote, String) async throws -> T
    ) async throws -> T {
        try await withTemporaryDirectory { dir in
            let remote = Remote()
            let directory = dir.appendingPathComponent("cache").path
            let cache = try CachedContentStore(
                remote: remote, directory: directory, budget: budget, logger: Logger(label: "cache"), clock: { clock.read() })
            return try await body(cache, remote, directory)
        }
    }

    @Test("a streamed miss fills the cache in the background; then the object is a local file and the remote is not asked")
    func missFillsThenHitsLocally() async throws {
        try await Self.withCache { cache, remote, directory in
            let bytes = Self.bytes(100_000, seed: 1)
            let digest = try await remote.put(bytes)
            #expect(try await cache.size(sha256: digest) == 100_000)
            #expect(cache.localFile(sha256: digest) == nil, "not cached yet")
            // A range from the middle is streamed, and fills nothing.
            #expect(try await Self.drain(try await cache.open(sha256: digest, range: 10...19)) == Array(bytes[10...19]))
            #expect(remote.opens == 1)
            // From the start: streamed, and the whole object fetched once more, for the cache.
            #expect(try await Self.drain(try await cache.open(sha256: digest, range: 0...99_999)) == bytes)
            try await Self.until("the fill kept the object") { cache.statistics.objects == 1 }
            #expect(remote.opens == 3)
            let (sizes, opens) = (remote.sizes, remote.opens)
            let file = try #require(cache.localFile(sha256: digest))
            #expect(file.path == directory + "/objects/" + digest.prefix(2) + "/" + digest.dropFirst(2))
            #expect(try [UInt8](Data(contentsOf: URL(fileURLWithPath: file.path))) == bytes)
            #expect(try await cache.size(sha256: digest) == 100_000)
            #expect(remote.sizes == sizes && remote.opens == opens, "a hit never reaches the remote")
            #expect(cache.statistics.hits == 1 && cache.statistics.misses == 1 && cache.statistics.bytes == 100_000)
            #expect(filesBelow(URL(fileURLWithPath: directory + "/tmp")).isEmpty)

            // A file removed behind the cache's back is a miss again, not a broken download.
            try FileManager.default.removeItem(atPath: file.path)
            #expect(try await cache.size(sha256: digest) == 100_000)
            #expect(remote.sizes == sizes + 1)
            #expect(cache.localFile(sha256: digest) == nil)
        }
    }

    @Test("one object is fetched for the cache at most once per 10 minutes, kept or not")
    func noRefetchLoop() async throws {
        try await Self.withCache { cache, remote, _ in
            let digest = try await remote.put(Self.bytes(20_000, seed: 6))
            remote.lying.withLock { _ = $0.insert(digest) }
            for _ in 0..<5 { _ = try await Self.drain(try await cache.open(sha256: digest, range: 0...19_999)) }
            // Five downloads, one fill (refused: the store lied): six reads in all.
            try await Self.until("the one fill ran") { remote.opens == 6 }
            try await Task.sleep(for: .milliseconds(50))
            #expect(remote.opens == 6 && cache.statistics.objects == 0)
        }
    }

    @Test("a link or a short file planted in the cache is neither indexed nor served; a fill replaces it")
    func plantedFilesAreNotServed() async throws {
        try await withTemporaryDirectory { dir in
            let remote = Remote()
            let directory = dir.appendingPathComponent("cache").path
            let secret = dir.appendingPathComponent("secret").path
            #expect(FileManager.default.createFile(atPath: secret, contents: Data(repeating: 7, count: 1000)))
            let linked = try await remote.put(Self.bytes(1000, seed: 7))
            let short = try await remote.put(Self.bytes(1000, seed: 8))
            for digest in [linked, short] {
                try FileManager.default.createDirectory(atPath: directory + "/objects/" + digest.prefix(2), withIntermediateDirectories: true)
            }
            let path = { (digest: String) in directory + "/objects/" + digest.prefix(2) + "/" + digest.dropFirst(2) }
            try FileManager.default.createSymbolicLink(atPath: path(linked), withDestinationPath: secret)
            #expect(FileManager.default.createFile(atPath: path(short), contents: Data([1, 2, 3])))
            let cache = try CachedContentStore(remote: remote, directory: directory, budget: 1 << 20, logger: Logger(label: "cache"))
            #expect(cache.statistics.objects == 1, "the short file is a regular file: indexed, not yet served")
            #expect(cache.localFile(sha256: short) == nil)
            #expect(try await cache.size(sha256: short) == 1000, "checked against the store: removed")
            #expect(cache.statistics.objects == 0 && !FileManager.default.fileExists(atPath: path(short)))
            for digest in [linked, short] {
                #expect(cache.localFile(sha256: digest) == nil)
                await cache.fill(digest)
                let file = try #require(cache.localFile(sha256: digest))
                #expect(SHA256.hash(data: try Data(contentsOf: URL(fileURLWithPath: file.path))).hexString == digest)
            }
            #expect(try Data(contentsOf: URL(fileURLWithPath: secret)) == Data(repeating: 7, count: 1000), "the link's target untouched")
        }
    }

    @Test("bytes that do not hash to their address are never kept; nor is an object over a quarter of the budget")
    func keepsOnlyVerifiedObjectsWithinBudget() async throws {
        try await Self.withCache(budget: 400_000) { cache, remote, directory in
            let digest = try await remote.put(Self.bytes(50_000, seed: 2))
            remote.lying.withLock { _ = $0.insert(digest) }
            await cache.fill(digest)
            #expect(cache.statistics.objects == 0)
            #expect(cache.localFile(sha256: digest) == nil)
            #expect(filesBelow(URL(fileURLWithPath: directory)).isEmpty, "nothing kept, nothing left in tmp")

            let big = try await remote.put(Self.bytes(100_001, seed: 3))
            await cache.fill(big)
            #expect(cache.statistics.objects == 0 && remote.opens == 1, "not even read")

            remote.lying.withLock { $0.removeAll() }
            await cache.fill(digest)
            #expect(cache.statistics.objects == 1)
        }
    }

    @Test("over budget, the least recently used go first; none used in the last 30 s; none another instance touched")
    func evictsLeastRecentlyUsed() async throws {
        let clock = TestClock()
        try await Self.withCache(budget: 400, clock: clock) { cache, remote, directory in
            var digests: [String] = []
            for seed in 0..<5 {
                let digest = try await remote.put(Self.bytes(100, seed: 10 + UInt64(seed)))
                digests.append(digest)
                await cache.fill(digest)
                clock.advance(1)  // distinct use times
            }
            #expect(cache.statistics.bytes == 500, "all used just now: the budget overshoots rather than evict them")
            _ = try #require(cache.localFile(sha256: digests[0]))  // the oldest, used again
            clock.advance(1)
            // Files' times are the real clock's (the cut-off for another instance's touch): evict
            // as of two minutes past both.
            let later = max(clock.read(), Date()).addingTimeInterval(120)
            clock.advance(later.timeIntervalSince(clock.read()))
            cache.evict()
            #expect(cache.statistics.bytes == 400)
            #expect(cache.localFile(sha256: digests[1]) == nil, "the least recently used went")
            #expect(!FileManager.default.fileExists(atPath: directory + "/objects/" + digests[1].prefix(2) + "/" + digests[1].dropFirst(2)))
            for kept in [2, 0, 3, 4] {
                #expect(cache.localFile(sha256: digests[kept]) != nil)
                clock.advance(1)
            }

            // Another instance sharing the directory served digests[2]: its file is newer than
            // the cut-off, so it stays, and the next least recently used goes.
            let extra = try await remote.put(Self.bytes(100, seed: 20))
            await cache.fill(extra)
            // Uses in this process, oldest first: 2, 0, 3, 4 (just above), extra. Evicting two
            // minutes on, when digests[2]'s file was touched after the cut-off.
            clock.advance(120)
            let future = timeval(tv_sec: Int(clock.read().timeIntervalSince1970) + 60, tv_usec: 0)
            var times = [future, future]
            let path2 = directory + "/objects/" + digests[2].prefix(2) + "/" + digests[2].dropFirst(2)
            #expect(utimes(path2, &times) == 0)
            cache.evict()
            #expect(cache.statistics.bytes == 400)
            #expect(FileManager.default.fileExists(atPath: path2), "touched by another instance: kept")
            #expect(cache.localFile(sha256: digests[0]) == nil, "the next least recently used went instead")
        }
    }

    @Test("a restart indexes what an earlier run kept and removes its unfinished fills")
    func restartIndexesTheDirectory() async throws {
        try await withTemporaryDirectory { dir in
            let remote = Remote()
            let directory = dir.appendingPathComponent("cache").path
            let digest = try await remote.put(Self.bytes(1000, seed: 4))
            let first = try CachedContentStore(remote: remote, directory: directory, budget: 1 << 20, logger: Logger(label: "cache"))
            await first.fill(digest)
            let leftover = directory + "/tmp/fill-left-by-a-crash"
            #expect(FileManager.default.createFile(atPath: leftover, contents: Data([1, 2, 3])))
            let old = timeval(tv_sec: Int(Date().timeIntervalSince1970) - 7200, tv_usec: 0)
            var times = [old, old]
            #expect(utimes(leftover, &times) == 0)

            let second = try CachedContentStore(remote: remote, directory: directory, budget: 1 << 20, logger: Logger(label: "cache"))
            #expect(second.statistics.objects == 1 && second.statistics.bytes == 1000)
            #expect(second.localFile(sha256: digest) == nil, "not served before its size was checked against the store")
            #expect(try await second.size(sha256: digest) == 1000)
            #expect(second.localFile(sha256: digest) != nil)
            #expect(!FileManager.default.fileExists(atPath: leftover))
        }
    }
}
