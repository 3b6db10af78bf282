import CofferCore
import Foundation
import GRDB

// One record type per table. Each wraps the CofferCore model and maps it to the snake_case
// columns of migrations/0001_initial.sql. Dates are REAL unix seconds.

extension Date {
    /// The stored representation: unix seconds.
    fileprivate var unixSeconds: Double { timeIntervalSince1970 }
}

extension Row {
    /// Decodes a non-null REAL unix-seconds column.
    fileprivate func date(_ column: Column) throws -> Date {
        Date(timeIntervalSince1970: try decode(Double.self, forColumn: column))
    }

    /// Decodes a nullable REAL unix-seconds column.
    fileprivate func optionalDate(_ column: Column) throws -> Date? {
        try decode(Double?.self, forColumn: column).map { Date(timeIntervalSince1970: $0) }
    }

    /// Decodes a TEXT column holding the raw value of `T`.
    fileprivate func enumValue<T: RawRepresentable>(_ type: T.Type, _ column: Column) throws -> T where T.RawValue == String {
        let raw = try decode(String.self, forColumn: column)
        guard let value = T(rawValue: raw) else { throw StoreError.invalidValue(column: column.name, value: raw) }
        return value
    }
}

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

/// A row of `assets`: one version of one asset.
struct AssetRecord: FetchableRecord, PersistableRecord, Sendable {
    static let databaseTableName = "assets"

    /// The columns of `assets`.
    enum Columns {
        static let assetId = Column("asset_id")
        static let version = Column("version")
        static let name = Column("name")
        static let contentType = Column("content_type")
        static let size = Column("size")
        static let sha256 = Column("sha256")
        static let createdAt = Column("created_at")
    }

    var asset: Asset

    init(_ asset: Asset) { self.asset = asset }

    init(row: Row) throws {
        asset = Asset(
            assetId: try row.decode(forColumn: Columns.assetId), version: try row.decode(forColumn: Columns.version),
            name: try row.decode(forColumn: Columns.name), contentType: try row.decode(forColumn: Columns.contentType),
            size: try row.decode(forColumn: Columns.size), sha256: try row.decode(forColumn: Columns.sha256),
            createdAt: try row.date(Columns.createdAt))
    }

    func encode(to container: inout PersistenceContainer) throws {
        container[Columns.assetId] = asset.assetId
        container[Columns.version] = asset.version
        container[Columns.name] = asset.name
        container[Columns.contentType] = asset.contentType
        container[Columns.size] = asset.size
        container[Columns.sha256] = asset.sha256
        container[Columns.createdAt] = asset.createdAt.unixSeconds
    }
}

/// A row of `redemptions`: the replay ledger.
struct RedemptionRecord: FetchableRecord, PersistableRecord, Sendable {
    static let databaseTableName = "redemptions"

    /// The columns of `redemptions`.
    enum Columns {
        static let sequence = Column("sequence")
        static let redemptionId = Column("redemption_id")
        static let transactionId = Column("transaction_id")
        static let originalTransactionId = Column("original_transaction_id")
        static let productId = Column("product_id")
        static let bundleId = Column("bundle_id")
        static let environment = Column("environment")
        static let purchaseDate = Column("purchase_date")
        static let quantity = Column("quantity")
        static let receiptSHA256 = Column("receipt_sha256")
        static let sourceFormat = Column("source_format")
        static let redeemedAt = Column("redeemed_at")
        static let clientAddress = Column("client_address")
        static let appAccountToken = Column("app_account_token")
        static let status = Column("status")
        static let grantHash = Column("grant_hash")
        static let replayKey = Column("replay_key")
    }

    var redemption: Redemption

    init(_ redemption: Redemption) { self.redemption = redemption }

    init(row: Row) throws {
        redemption = Redemption(
            sequence: try row.decode(forColumn: Columns.sequence), redemptionId: try row.decode(forColumn: Columns.redemptionId),
            transactionId: try row.decode(forColumn: Columns.transactionId),
            originalTransactionId: try row.decode(forColumn: Columns.originalTransactionId),
            productId: try row.decode(forColumn: Columns.productId), bundleId: try row.decode(forColumn: Columns.bundleId),
            environment: try row.decode(forColumn: Columns.environment), purchaseDate: try row.optionalDate(Columns.purchaseDate),
            quantity: try row.decode(forColumn: Columns.quantity), receiptSHA256: try row.decode(forColumn: Columns.receiptSHA256),
            sourceFormat: try row.enumValue(SourceFormat.self, Columns.sourceFormat), redeemedAt: try row.date(Columns.redeemedAt),
            clientAddress: try row.decode(forColumn: Columns.clientAddress),
            appAccountToken: try row.decode(forColumn: Columns.appAccountToken), status: try row.decode(forColumn: Columns.status),
            grantHash: try row.decode(forColumn: Columns.grantHash), replayKey: try row.decode(forColumn: Columns.replayKey))
    }

    /// Encodes every column but `sequence`, which SQLite assigns (AUTOINCREMENT).
    func encode(to container: inout PersistenceContainer) throws {
        container[Columns.redemptionId] = redemption.redemptionId
        container[Columns.transactionId] = redemption.transactionId
        container[Columns.originalTransactionId] = redemption.originalTransactionId
        container[Columns.productId] = redemption.productId
        container[Columns.bundleId] = redemption.bundleId
        container[Columns.environment] = redemption.environment
        container[Columns.purchaseDate] = redemption.purchaseDate?.unixSeconds
        container[Columns.quantity] = redemption.quantity
        container[Columns.receiptSHA256] = redemption.receiptSHA256
        container[Columns.sourceFormat] = redemption.sourceFormat.rawValue
        container[Columns.redeemedAt] = redemption.redeemedAt.unixSeconds
        container[Columns.clientAddress] = redemption.clientAddress
        container[Columns.appAccountToken] = redemption.appAccountToken
        container[Columns.status] = redemption.status
        container[Columns.grantHash] = redemption.grantHash
        container[Columns.replayKey] = redemption.replayKey
    }
}

/// A row of `attempts`: a refused redemption.
struct AttemptRecord: FetchableRecord, PersistableRecord, Sendable {
    static let databaseTableName = "attempts"

    /// The columns of `attempts`.
    enum Columns {
        static let sequence = Column("sequence")
        static let at = Column("at")
        static let code = Column("code")
        static let detail = Column("detail")
        static let transactionId = Column("transaction_id")
        static let productId = Column("product_id")
        static let receiptSHA256 = Column("receipt_sha256")
        static let clientAddress = Column("client_address")
        static let claimed = Column("claimed")
    }

    var attempt: RejectedAttempt

    init(_ attempt: RejectedAttempt) { self.attempt = attempt }

    init(row: Row) throws {
        attempt = RejectedAttempt(
            sequence: try row.decode(forColumn: Columns.sequence), at: try row.date(Columns.at), code: try row.decode(forColumn: Columns.code),
            detail: try row.decode(forColumn: Columns.detail), transactionId: try row.decode(forColumn: Columns.transactionId),
            productId: try row.decode(forColumn: Columns.productId), receiptSHA256: try row.decode(forColumn: Columns.receiptSHA256),
            clientAddress: try row.decode(forColumn: Columns.clientAddress), claimed: try row.decode(forColumn: Columns.claimed))
    }

    /// Encodes every column but `sequence`, which SQLite assigns (AUTOINCREMENT).
    func encode(to container: inout PersistenceContainer) throws {
        container[Columns.claimed] = attempt.claimed
        container[Columns.at] = attempt.at.unixSeconds
        container[Columns.code] = attempt.code
        container[Columns.detail] = attempt.detail
        container[Columns.transactionId] = attempt.transactionId
        container[Columns.productId] = attempt.productId
        container[Columns.receiptSHA256] = attempt.receiptSHA256
        container[Columns.clientAddress] = attempt.clientAddress
    }
}

/// A row of `api_keys`.
struct APIKeyRecord: FetchableRecord, PersistableRecord, Sendable {
    static let databaseTableName = "api_keys"

    /// The columns of `api_keys`.
    enum Columns {
        static let keyId = Column("key_id")
        static let name = Column("name")
        static let role = Column("role")
        static let secretHash = Column("secret_hash")
        static let createdAt = Column("created_at")
        static let revokedAt = Column("revoked_at")
    }

    var key: APIKey

    init(_ key: APIKey) { self.key = key }

    init(row: Row) throws {
        key = APIKey(
            keyId: try row.decode(forColumn: Columns.keyId), name: try row.decode(forColumn: Columns.name),
            role: try row.enumValue(Role.self, Columns.role), secretHash: try row.decode(forColumn: Columns.secretHash),
            createdAt: try row.date(Columns.createdAt), revokedAt: try row.optionalDate(Columns.revokedAt))
    }

    func encode(to container: inout PersistenceContainer) throws {
        container[Columns.keyId] = key.keyId
        container[Columns.name] = key.name
        container[Columns.role] = key.role.rawValue
        container[Columns.secretHash] = key.secretHash
        container[Columns.createdAt] = key.createdAt.unixSeconds
        container[Columns.revokedAt] = key.revokedAt?.unixSeconds
    }
}
