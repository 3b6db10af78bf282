import CofferCore
import Foundation
import GRDB

/// A row of `products`.
struct ProductRecord: FetchableRecord, PersistableRecord, Sendable {
    static let databaseTableName = "products"

    /// The columns of `products`.
    enum Columns {
        static let productId = Column("product_id")
        static let bundleId = Column("bundle_id")
        static let type = Column("type")
        static let assetIds = Column("asset_ids")
        static let title = Column("title")
        static let updatedAt = Column("updated_at")
    }

    var product: Product

    init(_ product: Product) { self.product = product }

    init(row: Row) throws {
        let json = try row.decode(String.self, forColumn: Columns.assetIds)
        let assetIds: [String]
        do {
            assetIds = try JSONDecoder().decode([String].self, from: Data(json.utf8))
        } catch {
            throw StoreError.invalidValue(column: Columns.assetIds.name, value: json)
        }
        product = Product(
            productId: try row.decode(forColumn: Columns.productId), bundleId: try row.decode(forColumn: Columns.bundleId),
            type: try row.enumValue(ProductType.self, Columns.type), assetIds: assetIds, title: try row.decode(forColumn: Columns.title),
            updatedAt: try row.date(Columns.updatedAt))
    }

    func encode(to container: inout PersistenceContainer) throws {
        let json = try JSONEncoder().encode(product.assetIds)
        container[Columns.productId] = product.productId
        container[Columns.bundleId] = product.bundleId
        container[Columns.type] = product.type.rawValue
        container[Columns.assetIds] = String(decoding: json, as: UTF8.self)
        container[Columns.title] = product.title
        container[Columns.updatedAt] = product.updatedAt.unixSeconds
    }
}
