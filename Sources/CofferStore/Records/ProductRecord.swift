import CofferCore
import Foundation
import GRDB

/// A row of `products` (migration 0001).
struct ProductRecord: CodableRecord, PersistableRecord, Sendable {
    static let databaseTableName = "products"

    /// The columns: the properties' coding keys.
    typealias Columns = CodingKeys
    enum CodingKeys: String, CodingKey, ColumnExpression {
        case productId = "product_id", bundleId = "bundle_id", type, assetIds = "asset_ids", title, updatedAt = "updated_at"
        case familyShareable = "family_shareable", durationSeconds = "duration_seconds"
    }

    var productId: String
    var bundleId: String
    /// The raw ``ProductType``.
    var type: String
    /// The asset ids as a JSON array, in Foundation's `JSONEncoder` default form (as stored since
    /// migration 0001). Converted by the record, not by GRDB's JSON column coding, so that a row
    /// that is not such an array is a ``StoreError/invalidValue(column:value:)``, as before.
    var assetIds: String
    var title: String
    var updatedAt: Date
    /// Migration 0004.
    var familyShareable: Bool
    var durationSeconds: Int64?

    /// The row for `product`.
    init(_ product: Product) throws {
        productId = product.productId
        bundleId = product.bundleId
        type = product.type.rawValue
        assetIds = String(decoding: try JSONEncoder().encode(product.assetIds), as: UTF8.self)
        title = product.title
        updatedAt = product.updatedAt
        familyShareable = product.familyShareable
        durationSeconds = product.durationSeconds
    }

    /// The stored product.
    func product() throws -> Product {
        let ids: [String]
        do {
            ids = try JSONDecoder().decode([String].self, from: Data(assetIds.utf8))
        } catch {
            throw StoreError.invalidValue(column: Columns.assetIds.name, value: assetIds)
        }
        guard let type = ProductType(rawValue: type) else { throw StoreError.invalidValue(column: Columns.type.name, value: type) }
        return Product(
            productId: productId, bundleId: bundleId, type: type, assetIds: ids, title: title, updatedAt: updatedAt, familyShareable: familyShareable,
            durationSeconds: durationSeconds)
    }
}
