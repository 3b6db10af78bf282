import CofferCore
import Foundation

/// In-memory catalogue with the SQLite catalogue's behaviour: ids compared and sorted byte for
/// byte, every asset version kept, an asset's digest 64 characters and its size not negative.
///
/// A logged change is made, then its entry recorded in `adminLog`; the change is undone if
/// that fails, as a failed transaction stores nothing. (Other calls may run while the entry is
/// recorded, an await, and see the change: a double, not a database.)
public actor InMemoryCatalogue: CatalogueRepository {
    private var productsById: [[UInt8]: Product] = [:]
    private var assetVersions: [[UInt8]: [Asset]] = [:]
    private let adminLog: InMemoryLedger?

    /// `adminLog`: where logged changes record their entries (a change given an entry
    /// without one throws ``InMemoryStorageError/adminLogUnavailable`` and is undone).
    public init(adminLog: InMemoryLedger? = nil) { self.adminLog = adminLog }

    public func putProduct(_ product: Product, logging: AdminAction?) async throws {
        let key = Array(product.productId.utf8)
        let previous = productsById.updateValue(product, forKey: key)
        do {
            try await log(logging)
        } catch {
            if productsById[key] == product { productsById[key] = previous }
            throw error
        }
    }

    public func product(_ productId: String) -> Product? { productsById[Array(productId.utf8)] }
    public func products() -> [Product] { productsById.sorted { $0.key.lexicographicallyPrecedes($1.key) }.map(\.value) }

    public func deleteProduct(_ productId: String, logging: AdminAction?) async throws -> Bool {
        let key = Array(productId.utf8)
        guard let deleted = productsById.removeValue(forKey: key) else { return false }
        do {
            try await log(logging)
        } catch {
            if productsById[key] == nil { productsById[key] = deleted }
            throw error
        }
        return true
    }

    public func addAssetVersion(
        assetId: String, name: String, contentType: String, size: Int64, sha256: String, at: Date, logging: AssetLogging?
    ) async throws -> Asset {
        guard sha256.unicodeScalars.count == 64, size >= 0 else {
            throw InMemoryStorageError.invalidValue("asset \(assetId): size \(size), sha256 \(sha256)")
        }
        let key = Array(assetId.utf8)
        let version = (assetVersions[key]?.last?.version ?? 0) + 1
        let asset = Asset(assetId: assetId, version: version, name: name, contentType: contentType, size: size, sha256: sha256, createdAt: at)
        assetVersions[key, default: []].append(asset)
        do {
            try await log(logging?(asset))
        } catch {
            assetVersions[key]?.removeAll { $0 == asset }
            throw error
        }
        return asset
    }

    private func log(_ action: AdminAction?) async throws {
        guard let action else { return }
        guard let adminLog else { throw InMemoryStorageError.adminLogUnavailable }
        try await adminLog.record(action)
    }

    public func asset(_ assetId: String) -> Asset? { assetVersions[Array(assetId.utf8)]?.last }
    public func referencedDigests() -> Set<String> { Set(assetVersions.values.flatMap { $0.map(\.sha256) }) }

    public func versions(of assetId: String) -> [Asset] { (assetVersions[Array(assetId.utf8)] ?? []).reversed() }

    public func assets() -> [Asset] {
        assetVersions.sorted { $0.key.lexicographicallyPrecedes($1.key) }.compactMap(\.value.last)
    }
}
