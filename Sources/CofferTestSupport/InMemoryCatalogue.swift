import CofferCore
import Foundation

/// In-memory catalogue: a test double and the reference behaviour for other stores.
public actor InMemoryCatalogue: CatalogueRepository {
    private var productsById: [String: Product] = [:]
    private var assetVersions: [String: [Asset]] = [:]

    public init() {}

    public func putProduct(_ product: Product) { productsById[product.productId] = product }
    public func product(_ productId: String) -> Product? { productsById[productId] }
    public func products() -> [Product] { productsById.values.sorted { $0.productId < $1.productId } }
    public func deleteProduct(_ productId: String) -> Bool { productsById.removeValue(forKey: productId) != nil }

    public func addAssetVersion(assetId: String, name: String, contentType: String, size: Int64, sha256: String, at: Date) -> Asset {
        let version = (assetVersions[assetId]?.last?.version ?? 0) + 1
        let asset = Asset(assetId: assetId, version: version, name: name, contentType: contentType, size: size, sha256: sha256, createdAt: at)
        assetVersions[assetId, default: []].append(asset)
        return asset
    }

    public func asset(_ assetId: String) -> Asset? { assetVersions[assetId]?.last }
    public func assets() -> [Asset] { assetVersions.values.compactMap(\.last).sorted { $0.assetId < $1.assetId } }
}
