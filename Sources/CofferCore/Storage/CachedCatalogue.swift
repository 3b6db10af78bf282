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
public final class CachedCatalogue: CatalogueRepository {
    struct State {
        var generation: UInt64 = 0
        var products: [String: Entry<Product>] = [:]
        var assets: [String: Entry<Asset>] = [:]
    }

    struct Entry<Value: Sendable>: Sendable {
        var value: Value
        var filled: ContinuousClock.Instant
    }

    private let store: any CatalogueRepository
    private let maxAge: Duration?
    private let state = Mutex(State())

    /// `maxAge` nil: entries stay until this process changes them (the only writer).
    public init(_ store: any CatalogueRepository, maxAge: Duration? = nil) {
        self.store = store
        self.maxAge = maxAge
    }

    /// The entry's value while it is fresh.
    private func fresh<V>(_ entry: Entry<V>?) -> V? {
        guard let entry else { return nil }
        if let maxAge, entry.filled.duration(to: .now) > maxAge { return nil }
        return entry.value
    }

    private func invalidate(_ change: (inout State) -> Void) {
        state.withLock { s in
            s.generation &+= 1
            change(&s)
        }
    }

    /// Reads through the cache: `cached` looks up, `load` reads the store, `fill` stores.
    private func read<T>(_ cached: (State) -> T?, load: () async throws -> T?, fill: @escaping (inout State, T) -> Void) async throws -> T? {
        let (hit, generation) = state.withLock { s in (cached(s), s.generation) }
        if let hit { return hit }
        guard let value = try await load() else { return nil }
        state.withLock { s in if s.generation == generation { fill(&s, value) } }
        return value
    }

    public func putProduct(_ product: Product) async throws {
        defer { invalidate { $0.products[product.productId] = nil } }
        try await store.putProduct(product)
    }

    public func product(_ productId: String) async throws -> Product? {
        try await read(
            { fresh($0.products[productId]) }, load: { try await store.product(productId) },
            fill: { $0.products[productId] = Entry(value: $1, filled: .now) })
    }

    public func products() async throws -> [Product] { try await store.products() }

    public func deleteProduct(_ productId: String) async throws -> Bool {
        defer { invalidate { $0.products[productId] = nil } }
        return try await store.deleteProduct(productId)
    }

    public func addAssetVersion(assetId: String, name: String, contentType: String, size: Int64, sha256: String, at: Date) async throws -> Asset {
        defer { invalidate { $0.assets[assetId] = nil } }
        return try await store.addAssetVersion(assetId: assetId, name: name, contentType: contentType, size: size, sha256: sha256, at: at)
    }

    public func asset(_ assetId: String) async throws -> Asset? {
        try await read(
            { fresh($0.assets[assetId]) }, load: { try await store.asset(assetId) }, fill: { $0.assets[assetId] = Entry(value: $1, filled: .now) })
    }

    public func assets() async throws -> [Asset] { try await store.assets() }
    public func versions(of assetId: String) async throws -> [Asset] { try await store.versions(of: assetId) }
    public func referencedDigests() async throws -> Set<String> { try await store.referencedDigests() }
}
