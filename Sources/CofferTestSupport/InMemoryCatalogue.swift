import CofferCore
import Foundation

/// In-memory catalogue with the SQLite catalogue's behaviour: ids compared and sorted byte for
/// byte, every asset version kept, an asset's digest 64 characters and its size not negative.
public actor InMemoryCatalogue: CatalogueRepository {
    private var productsById: [[UInt8]: Product] = [:]
    private var assetVersions: [[UInt8]: [Asset]] = [:]

    public init() {}

    public func putProduct(_ product: Product) { productsById[Array(product.productId.utf8)] = product }
    public func product(_ productId: String) -> Product? { productsById[Array(productId.utf8)] }
    public func products() -> [Product] { productsById.sorted { $0.key.lexicographicallyPrecedes($1.key) }.map(\.value) }
    public func deleteProduct(_ productId: String) -> Bool { productsById.removeValue(forKey: Array(productId.utf8)) != nil }

    public func addAssetVersion(assetId: String, name: String, contentType: String, size: Int64, sha256: String, at: Date) throws -> Asset {
        guard sha256.unicodeScalars.count == 64, size >= 0 else {
            throw InMemoryStorageError.invalidValue("asset \(assetId): size \(size), sha256 \(sha256)")
        }
        let key = Array(assetId.utf8)
        let version = (assetVersions[key]?.last?.version ?? 0) + 1
        let asset = Asset(assetId: assetId, version: version, name: name, contentType: contentType, size: size, sha256: sha256, createdAt: at)
        assetVersions[key, default: []].append(asset)
        return asset
    }

    public func asset(_ assetId: String) -> Asset? { assetVersions[Array(assetId.utf8)]?.last }
    public func referencedDigests() -> Set<String> { Set(assetVersions.values.flatMap { $0.map(\.sha256) }) }

    public func versions(of assetId: String) -> [Asset] { (assetVersions[Array(assetId.utf8)] ?? []).reversed() }

    public func assets() -> [Asset] {
        assetVersions.sorted { $0.key.lexicographicallyPrecedes($1.key) }.compactMap(\.value.last)
    }
}
