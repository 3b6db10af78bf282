import Foundation
import Synchronization

/// The catalogue, read through an in-memory cache. Every redemption reads a product and its
/// assets; the catalogue changes only through this process's admin API, which writes through
/// this type. A write drops the cached entry after the store has it; a read fills the cache
/// only if no write happened while it was reading (a generation counter), so a slow read
/// can never re-insert a value older than a write. Lists (`products()`, `assets()`) always
/// read the store; unknown ids are not cached (they cannot fill memory).
///
/// When other processes write the same store (instances sharing one database), `maxAge`
/// bounds how long a cached entry is served: their changes are seen here within that time.
/// An entry is read again ahead of that: the first caller to find it half `maxAge` old starts
/// one read in the background and is answered from the cache like everyone else, so a busy
/// instance never finds its entries expired. Callers that do find no fresh entry share one
/// store read per id (an expiry under load used to send every concurrent redemption to the
/// database at once: 2,000 redemptions/s through two instances stalled for 10–30 ms every
/// `maxAge`, the writer waiting for a pooled connection behind the herd).
public final class CachedCatalogue: CatalogueRepository {
    private let store: any CatalogueRepository
    private let productTable: ReadThrough<Product>
    private let assetTable: ReadThrough<Asset>
    /// Checks each product and asset read from the store against the admin log (nil: none).
    private let backing: CatalogueBacking?

    /// `maxAge` nil: entries stay until this process changes them (the only writer). `now`:
    /// the clock the ages are measured on (tests move it). `backing`: a product or asset the
    /// admin log does not back is never cached or returned (its read throws).
    public init(
        _ store: any CatalogueRepository, maxAge: Duration? = nil, backing: CatalogueBacking? = nil,
        now: @escaping @Sendable () -> ContinuousClock.Instant = { .now }
    ) {
        self.store = store
        self.backing = backing
        productTable = ReadThrough(maxAge: maxAge, now: now)
        assetTable = ReadThrough(maxAge: maxAge, now: now)
    }

    public func putProduct(_ product: Product, logging: AdminAction?) async throws {
        defer { productTable.invalidate(product.productId) }
        try await store.putProduct(product, logging: logging)
    }

    public func product(_ productId: String) async throws -> Product? {
        try await productTable.read(productId) { [store, backing] in
            guard let backing else { return try await store.product(productId) }
            return try await backing.product { try await store.product(productId) }
        }
    }

    public func products() async throws -> [Product] { try await store.products() }

    public func deleteProduct(_ productId: String, logging: AdminAction?) async throws -> Bool {
        defer { productTable.invalidate(productId) }
        return try await store.deleteProduct(productId, logging: logging)
    }

    public func addAssetVersion(
        assetId: String, name: String, contentType: String, size: Int64, sha256: String, at: Date, logging: AssetLogging?
    ) async throws -> Asset {
        defer { assetTable.invalidate(assetId) }
        return try await store.addAssetVersion(
            assetId: assetId, name: name, contentType: contentType, size: size, sha256: sha256, at: at, logging: logging)
    }

    public func asset(_ assetId: String) async throws -> Asset? {
        try await assetTable.read(assetId) { [store, backing] in
            guard let backing else { return try await store.asset(assetId) }
            return try await backing.asset { try await store.asset(assetId) }
        }
    }

    public func assets() async throws -> [Asset] { try await store.assets() }
    public func versions(of assetId: String) async throws -> [Asset] { try await store.versions(of: assetId) }
    public func referencedDigests() async throws -> Set<String> { try await store.referencedDigests() }

    /// Every product and latest asset version the admin log does not back (none without a
    /// `backing`): the server does not start over them.
    public func unbacked() async throws -> [CatalogueFinding] {
        guard let backing else { return [] }
        return try await backing.unbacked(products: try await store.products(), assets: try await store.assets())
    }
}

/// One kind of catalogue value by id: the entries, the store reads in flight (one per id,
/// shared by its callers) and the generation — bumped by every write through the cache — a
/// read must still be in to fill an entry.
final class ReadThrough<Value: Sendable>: Sendable {
    private struct Entry {
        var value: Value
        /// When the read that gave it began: the store held this value then or later.
        var read: ContinuousClock.Instant
    }

    private struct Flight {
        var number: UInt64
        var generation: UInt64
        var started: ContinuousClock.Instant
        var task: Task<Value?, any Error>
    }

    private struct State {
        var generation: UInt64 = 0
        var flights: UInt64 = 0
        var entries: [String: Entry] = [:]
        var inFlight: [String: Flight] = [:]
    }

    private enum Step {
        case cached(Value)
        case wait(Task<Value?, any Error>)
    }

    private let state = Mutex(State())
    private let maxAge: Duration?
    private let now: @Sendable () -> ContinuousClock.Instant

    init(maxAge: Duration?, now: @escaping @Sendable () -> ContinuousClock.Instant) {
        self.maxAge = maxAge
        self.now = now
    }

    /// The cached value while it is fresh (starting a read ahead once it is half `maxAge`
    /// old); otherwise the value of the read in flight for `id`, or of a new one.
    func read(_ id: String, load: @escaping @Sendable () async throws -> Value?) async throws -> Value? {
        let at = now()
        let step = state.withLock { s -> Step in
            if let entry = s.entries[id] {
                guard let maxAge else { return .cached(entry.value) }
                let age = entry.read.duration(to: at)
                if age <= maxAge {
                    if age >= maxAge / 2, joinable(s, id, at: at) == nil { _ = start(&s, id, at: at, load: load) }
                    return .cached(entry.value)
                }
            }
            return .wait(joinable(s, id, at: at)?.task ?? start(&s, id, at: at, load: load))
        }
        switch step {
        case .cached(let value): return value
        case .wait(let task): return try await task.value
        }
    }

    /// The read in flight for `id` a caller may wait for: begun after the last write, and —
    /// where other processes write the store — less than `maxAge` ago. A read that hangs (a
    /// connection the network dropped without a word) then holds only the callers that came
    /// while it was young; later ones start a read of their own, and its value would be too
    /// old anyway.
    private func joinable(_ s: State, _ id: String, at: ContinuousClock.Instant) -> Flight? {
        guard let flight = s.inFlight[id], flight.generation == s.generation else { return nil }
        if let maxAge, flight.started.duration(to: at) > maxAge { return nil }
        return flight
    }

    /// After a write of `id` through the cache: the entry goes, and no read begun before
    /// the write fills one (any id's: the generation is shared).
    func invalidate(_ id: String) {
        state.withLock { s in
            s.generation &+= 1
            s.entries[id] = nil
        }
    }

    /// A store read for `id`, registered as in flight (under the lock).
    private func start(_ s: inout State, _ id: String, at: ContinuousClock.Instant, load: @escaping @Sendable () async throws -> Value?) -> Task<
        Value?, any Error
    > {
        s.flights &+= 1
        let number = s.flights
        let generation = s.generation
        let task = Task {
            do {
                let value = try await load()
                self.land(id, number: number, generation: generation, began: at, outcome: .success(value))
                return value
            } catch {
                self.land(id, number: number, generation: generation, began: at, outcome: .failure(error))
                throw error
            }
        }
        s.inFlight[id] = Flight(number: number, generation: generation, started: at, task: task)
        return task
    }

    /// A read is over: its flight goes (unless a newer one took its place); its value is kept
    /// if no write happened since it began and no read begun later has landed (a hung read
    /// left behind) — an id the store no longer has drops the entry, a failed read keeps the
    /// old one until its `maxAge`.
    private func land(_ id: String, number: UInt64, generation: UInt64, began: ContinuousClock.Instant, outcome: Result<Value?, any Error>) {
        state.withLock { s in
            if s.inFlight[id]?.number == number { s.inFlight[id] = nil }
            guard s.generation == generation, case .success(let value) = outcome, s.entries[id].map({ $0.read <= began }) ?? true else { return }
            s.entries[id] = value.map { Entry(value: $0, read: began) }
        }
    }
}
