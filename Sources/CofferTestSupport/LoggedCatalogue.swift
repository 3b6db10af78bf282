import CofferCore
import Foundation

extension CatalogueRepository {
    /// Puts a product as an admin does through the API: with the `product.put` entry the
    /// server logs (``CatalogueLog/productDetail(_:)``), so an audit finds it backed.
    public func putLoggedProduct(_ product: Product, by keyName: String = "test admin") async throws {
        try await putProduct(
            product, logging: .test(.productPut, target: product.productId, detail: CatalogueLog.productDetail(product), by: keyName))
    }

    /// Stores a new asset version as an upload does, with its `asset.upload` entry.
    public func addLoggedAssetVersion(
        assetId: String, name: String, contentType: String, size: Int64, sha256: String, at: Date, by keyName: String = "test admin"
    ) async throws -> Asset {
        try await addAssetVersion(
            assetId: assetId, name: name, contentType: contentType, size: size, sha256: sha256, at: at,
            logging: { .test(.assetUpload, target: $0.assetId, detail: CatalogueLog.uploadDetail($0), by: keyName) })
    }
}

extension AdminAction {
    /// An entry by a test's admin.
    static func test(_ action: AdminActionName, target: String, detail: String, by keyName: String) -> AdminAction {
        AdminAction(at: Date(), keyId: "test", keyName: keyName, action: action, target: target, detail: detail, clientAddress: "192.0.2.1")
    }
}

extension CatalogueRepository {
    /// Inserts or replaces a product, logging nothing: a row `coffer ledger verify` names as
    /// unbacked (tests only — every catalogue change the server makes is logged, so these
    /// live here, not beside the protocol).
    public func putProduct(_ product: Product) async throws { try await putProduct(product, logging: nil) }
    /// Deletes a product, logging nothing; returns whether one was deleted.
    public func deleteProduct(_ productId: String) async throws -> Bool { try await deleteProduct(productId, logging: nil) }
    /// Stores a new version of an asset, logging nothing.
    public func addAssetVersion(assetId: String, name: String, contentType: String, size: Int64, sha256: String, at: Date) async throws -> Asset {
        try await addAssetVersion(assetId: assetId, name: name, contentType: contentType, size: size, sha256: sha256, at: at, logging: nil)
    }
}
