import CofferCore
import CofferTestSupport
import Foundation
import Synchronization
import Testing

/// The catalogue's read-through cache as instances sharing one database use it: entries no
/// older than `maxAge`, read again ahead of their expiry without making anyone wait, one store
/// read per id however many callers miss at once, and no read begun before a write filling
/// the cache after it.
@Suite("CachedCatalogue", .timeLimit(.minutes(4)))
struct CachedCatalogueTests {
    /// A catalogue whose reads are counted and, while the gate is shut, held after they read
    /// (a slow database: the value is what the store held when the read began). Writes to
    /// `base` are another instance's.
    final class GatedCatalogue: CatalogueRepository {
        let base = InMemoryCatalogue()
        private struct State {
            var reads = 0
            var shut = false
            var failing = false
            /// In arrival order; nil once let go.
            var held: [CheckedContinuation<Void, Never>?] = []
        }
        struct Unavailable: Error {}
        private let state = Mutex(State())
        var reads: Int { state.withLock { $0.reads } }

        func shut() { state.withLock { $0.shut = true } }
        func fail(_ failing: Bool) { state.withLock { $0.failing = failing } }
        /// Lets the read that came `index`-th of those held go on (the others stay held).
        func release(_ index: Int) {
            let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
                guard s.held.indices.contains(index) else { return nil }
                defer { s.held[index] = nil }
                return s.held[index]
            }
            waiter?.resume()
        }
        func open() {
            let held = state.withLock { s in
                s.shut = false
                defer { s.held = [] }
                return s.held
            }
            for waiter in held { waiter?.resume() }
        }

        private func gate() async throws {
            await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
                let hold = state.withLock { s in
                    s.reads += 1
                    if s.shut { s.held.append(waiter) }
                    return s.shut
                }
                if !hold { waiter.resume() }
            }
            if state.withLock({ $0.failing }) { throw Unavailable() }
        }

        func product(_ productId: String) async throws -> Product? {
            let value = await base.product(productId)
            try await gate()
            return value
        }
        func asset(_ assetId: String) async throws -> Asset? {
            let value = await base.asset(assetId)
            try await gate()
            return value
        }
        func putProduct(_ product: Product, logging: AdminAction?) async throws { try await base.putProduct(product, logging: logging) }
        func products() async throws -> [Product] { await base.products() }
        func deleteProduct(_ productId: String, logging: AdminAction?) async throws -> Bool {
            try await base.deleteProduct(productId, logging: logging)
        }
        func addAssetVersion(
            assetId: String, name: String, contentType: String, size: Int64, sha256: String, at: Date, logging: AssetLogging?
        ) async throws -> Asset {
            try await base.addAssetVersion(
                assetId: assetId, name: name, contentType: contentType, size: size, sha256: sha256, at: at, logging: logging)
        }
        func assets() async throws -> [Asset] { await base.assets() }
        func versions(of assetId: String) async throws -> [Asset] { await base.versions(of: assetId) }
        func referencedDigests() async throws -> Set<String> { await base.referencedDigests() }
    }

    /// A clock the test moves: ages never depend on how fast the machine is.
    final class TestClock: Sendable {
        private let instant = Mutex(ContinuousClock.now)
        func now() -> ContinuousClock.Instant { instant.withLock { $0 } }
        func advance(_ duration: Duration) { instant.withLock { $0 += duration } }
    }

    final class Count: Sendable {
        private let count = Mutex(0)
        var value: Int { count.withLock { $0 } }
        func add() { count.withLock { $0 += 1 } }
    }

    static let maxAge = Duration.seconds(2)

    static func product(_ title: String) -> Product {
        Product(
            productId: "com.coffer.demo.levelpack1", bundleId: "com.coffer.demo", type: .nonConsumable, assetIds: ["level-1"], title: title,
            updatedAt: Date(timeIntervalSince1970: 1_800_000_000))
    }

    static func made() -> (GatedCatalogue, TestClock, CachedCatalogue) {
        let store = GatedCatalogue()
        let clock = TestClock()
        return (store, clock, CachedCatalogue(store, maxAge: maxAge, now: { clock.now() }))
    }

    /// Waits (30 s at most) until `condition` holds.
    static func until(_ what: String, _ condition: () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if try await condition() { return }
            try await Task.sleep(for: .milliseconds(5))
        }
        Issue.record("never: \(what)")
    }

    @Test("callers that miss at once share one store read")
    func missesShareOneRead() async throws {
        let (store, _, cache) = Self.made()
        try await store.base.putProduct(Self.product("v1"))
        store.shut()
        let called = Count()
        try await withThrowingTaskGroup(of: Product?.self) { group in
            for _ in 0..<50 {
                group.addTask {
                    called.add()
                    return try await cache.product("com.coffer.demo.levelpack1")
                }
            }
            try await Self.until("every caller called") { called.value == 50 && store.reads >= 1 }
            // Time for a second read to reach the store, were the callers not sharing the
            // first (no outcome depends on it: sharing, there never is a second).
            let grace = ContinuousClock.now + .milliseconds(200)
            try await Self.until("a second read, or 200 ms") { store.reads > 1 || ContinuousClock.now >= grace }
            store.open()
            for try await product in group { #expect(product?.title == "v1") }
        }
        #expect(store.reads == 1)
    }

    @Test("an entry half maxAge old is read again in the background; callers are answered from the cache meanwhile")
    func refreshesAhead() async throws {
        let (store, clock, cache) = Self.made()
        try await store.base.putProduct(Self.product("v1"))
        #expect(try await cache.product("com.coffer.demo.levelpack1")?.title == "v1")
        #expect(store.reads == 1)

        // Younger than half maxAge: no read.
        clock.advance(.milliseconds(900))
        #expect(try await cache.product("com.coffer.demo.levelpack1")?.title == "v1")
        #expect(store.reads == 1)

        // Another instance changes it; the store is slow.
        try await store.base.putProduct(Self.product("v2"))
        store.shut()
        clock.advance(.milliseconds(200))
        // Answered at once from the cache (a caller waiting for the read would hang here
        // until the gate opens, and the test would never end) …
        #expect(try await cache.product("com.coffer.demo.levelpack1")?.title == "v1")
        // … having started the read ahead, which is held at the store.
        try await Self.until("the read ahead reached the store") { store.reads == 2 }
        for _ in 0..<20 { #expect(try await cache.product("com.coffer.demo.levelpack1")?.title == "v1") }
        #expect(store.reads == 2, "one read ahead, however many callers")
        store.open()
        try await Self.until("the read ahead landed") { try await cache.product("com.coffer.demo.levelpack1")?.title == "v2" }
        #expect(store.reads == 2)
    }

    @Test("an entry older than maxAge is never served: callers wait for the store, or get its error")
    func neverOlderThanMaxAge() async throws {
        let (store, clock, cache) = Self.made()
        try await store.base.putProduct(Self.product("v1"))
        _ = try await cache.product("com.coffer.demo.levelpack1")
        try await store.base.putProduct(Self.product("v2"))

        // The store fails: past maxAge the stale entry is not an answer.
        store.fail(true)
        clock.advance(Self.maxAge + .milliseconds(1))
        await #expect(throws: GatedCatalogue.Unavailable.self) { try await cache.product("com.coffer.demo.levelpack1") }
        await #expect(throws: GatedCatalogue.Unavailable.self) { try await cache.product("com.coffer.demo.levelpack1") }
        #expect(store.reads == 3, "a failed read is not cached")

        store.fail(false)
        store.shut()
        let waiting = Task { try await cache.product("com.coffer.demo.levelpack1") }
        try await Self.until("the read reached the store") { store.reads == 4 }
        store.open()
        #expect(try await waiting.value?.title == "v2")
    }

    @Test("a read that hangs holds only the callers that came while it was younger than maxAge")
    func hungReadIsLeftBehind() async throws {
        let (store, clock, cache) = Self.made()
        try await store.base.putProduct(Self.product("v1"))
        store.shut()
        let first = Task { try await cache.product("com.coffer.demo.levelpack1") }
        try await Self.until("the first read reached the store") { store.reads == 1 }
        clock.advance(Self.maxAge + .milliseconds(1))
        let later = Task { try await cache.product("com.coffer.demo.levelpack1") }
        try await Self.until("a read of its own") { store.reads == 2 }
        try await store.base.putProduct(Self.product("v2"))
        // The later read lands first; the hung one lands after it, and must not replace its
        // entry with one already older than maxAge.
        store.release(1)
        #expect(try await later.value?.title == "v1")
        store.release(0)
        #expect(try await first.value?.title == "v1")
        store.open()
        #expect(try await cache.product("com.coffer.demo.levelpack1")?.title == "v1", "the later read's entry, still fresh")
        #expect(store.reads == 2)
    }

    @Test("a read begun before a write through the cache neither fills it nor answers callers after the write")
    func writeWins() async throws {
        let (store, _, cache) = Self.made()
        try await store.base.putProduct(Self.product("v1"))
        store.shut()
        let before = Task { try await cache.product("com.coffer.demo.levelpack1") }
        try await Self.until("the first read reached the store") { store.reads == 1 }
        try await cache.putProduct(Self.product("v2"))
        let after = Task { try await cache.product("com.coffer.demo.levelpack1") }
        try await Self.until("a read of its own after the write") { store.reads == 2 }
        store.open()
        #expect(try await before.value?.title == "v1", "it began before the write")
        #expect(try await after.value?.title == "v2")
        #expect(try await cache.product("com.coffer.demo.levelpack1")?.title == "v2")
        #expect(store.reads == 2, "the later read's value is cached, the earlier one's is not")
    }

    @Test("an id deleted by another instance is gone within maxAge, and unknown ids are not cached")
    func deletedElsewhere() async throws {
        let (store, clock, cache) = Self.made()
        let asset = try await store.base.addAssetVersion(
            assetId: "level-1", name: "level-1.bin", contentType: "application/octet-stream", size: 3, sha256: String(repeating: "a", count: 64),
            at: Date(timeIntervalSince1970: 1_800_000_000))
        #expect(try await cache.asset("level-1") == asset)
        try await store.base.putProduct(Self.product("v1"))
        #expect(try await cache.product("com.coffer.demo.levelpack1") != nil)
        _ = try await store.base.deleteProduct("com.coffer.demo.levelpack1")
        clock.advance(Self.maxAge + .milliseconds(1))
        #expect(try await cache.product("com.coffer.demo.levelpack1") == nil)
        let reads = store.reads
        #expect(try await cache.product("com.coffer.demo.levelpack1") == nil)
        #expect(try await cache.product("nope") == nil)
        #expect(store.reads == reads + 2, "nil is never cached")
    }
}
