import Foundation

/// How a product is consumed.
public enum ProductType: String, Codable, Sendable, Hashable, CaseIterable {
    case consumable, nonConsumable
    /// An auto-renewable subscription (a season pass): entitles while paid for.
    case autoRenewable
    /// A non-renewing subscription: entitles for the product's ``Product/durationSeconds``
    /// from its purchase date.
    case nonRenewing

    /// The catalogue type of an App Store product type.
    public init(_ appStore: AppStoreProductType) {
        switch appStore {
        case .consumable: self = .consumable
        case .nonConsumable: self = .nonConsumable
        case .autoRenewableSubscription: self = .autoRenewable
        case .nonRenewingSubscription: self = .nonRenewing
        }
    }

    /// Whether an entitlement of this type ends (at the transaction's `expiresDate`, or the
    /// purchase date plus the product's duration).
    public var isSubscription: Bool { self == .autoRenewable || self == .nonRenewing }
}

/// An App Store product and the assets it unlocks.
public struct Product: Codable, Sendable, Hashable {
    public var productId: String
    public var bundleId: String
    public var type: ProductType
    public var assetIds: [String]
    public var title: String
    public var updatedAt: Date
    /// Whether a family member's copy (`inAppOwnershipType` FAMILY_SHARED) unlocks it.
    public var familyShareable: Bool
    /// A non-renewing subscription's length in seconds (nil for other types).
    public var durationSeconds: Int64?

    public init(
        productId: String, bundleId: String, type: ProductType, assetIds: [String], title: String, updatedAt: Date, familyShareable: Bool = false,
        durationSeconds: Int64? = nil
    ) {
        self.productId = productId
        self.bundleId = bundleId
        self.type = type
        self.assetIds = assetIds
        self.title = title
        self.updatedAt = updatedAt
        self.familyShareable = familyShareable
        self.durationSeconds = durationSeconds
    }

    enum CodingKeys: String, CodingKey {
        case productId, bundleId, type, assetIds, title, updatedAt, familyShareable, durationSeconds
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            productId: try c.decode(String.self, forKey: .productId), bundleId: try c.decode(String.self, forKey: .bundleId),
            type: try c.decode(ProductType.self, forKey: .type), assetIds: try c.decode([String].self, forKey: .assetIds),
            title: try c.decode(String.self, forKey: .title), updatedAt: try c.decode(Date.self, forKey: .updatedAt),
            familyShareable: try c.decodeIfPresent(Bool.self, forKey: .familyShareable) ?? false,
            durationSeconds: try c.decodeIfPresent(Int64.self, forKey: .durationSeconds))
    }
}

/// One stored version of an asset. The bytes live in the content store under `sha256`.
public struct Asset: Codable, Sendable, Hashable {
    public var assetId: String
    public var version: Int
    public var name: String
    public var contentType: String
    public var size: Int64
    /// Lower-case hex SHA-256 of the bytes.
    public var sha256: String
    public var createdAt: Date

    public init(assetId: String, version: Int, name: String, contentType: String, size: Int64, sha256: String, createdAt: Date) {
        self.assetId = assetId
        self.version = version
        self.name = name
        self.contentType = contentType
        self.size = size
        self.sha256 = sha256
        self.createdAt = createdAt
    }
}

/// The state of a ledger row. Only `redeemed` exists: a refund or revocation is its own
/// chained event (``Revocation``), never an update of the row.
public enum RedemptionStatus: String, Codable, Sendable, Hashable, CaseIterable {
    case redeemed
}

/// Where a redeemed transaction came from.
public enum SourceFormat: String, Codable, Sendable, Hashable {
    case appReceipt, signedTransaction
}

/// One redeemed transaction: the ledger row. `transactionId` is unique across formats.
public struct Redemption: Codable, Sendable, Hashable {
    /// Ledger order (assigned by the store; 0 before insertion).
    public var sequence: Int64
    public var redemptionId: String
    public var transactionId: String
    public var originalTransactionId: String?
    public var productId: String
    public var bundleId: String
    public var environment: String
    public var purchaseDate: Date?
    public var quantity: Int
    /// Lower-case hex SHA-256 of the submitted receipt / JWS bytes.
    public var receiptSHA256: String
    public var sourceFormat: SourceFormat
    public var redeemedAt: Date
    public var clientAddress: String
    public var appAccountToken: String?
    public var status: String
    /// SHA-256 (hex) of the grant secret handed to the client; the secret itself is never stored.
    public var grantHash: String
    /// What makes a second redemption a replay, within `environment`: the transaction id of a
    /// consumable, the original transaction id of a non-consumable (a restore on another device
    /// carries a new transaction id for the same purchase). Nil on rows written before
    /// migration 0003, which are keyed by `transactionId`.
    public var replayKey: String?
    /// The player the purchase is bound to (the player token's `sub`); nil without player
    /// identity (and on rows written before migration 0004).
    public var playerId: String?
    /// When a subscription's entitlement ended as of this redemption (the transaction's
    /// `expiresDate`, or purchase date plus duration); later events may extend it. Nil for
    /// purchases that do not end.
    public var expiresAt: Date?

    public init(
        sequence: Int64 = 0, redemptionId: String, transactionId: String, originalTransactionId: String?, productId: String,
        bundleId: String, environment: String, purchaseDate: Date?, quantity: Int, receiptSHA256: String, sourceFormat: SourceFormat,
        redeemedAt: Date, clientAddress: String, appAccountToken: String?, status: String = RedemptionStatus.redeemed.rawValue, grantHash: String,
        replayKey: String? = nil, playerId: String? = nil, expiresAt: Date? = nil
    ) {
        self.playerId = playerId
        self.expiresAt = expiresAt
        self.sequence = sequence
        self.redemptionId = redemptionId
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        self.bundleId = bundleId
        self.environment = environment
        self.purchaseDate = purchaseDate
        self.quantity = quantity
        self.receiptSHA256 = receiptSHA256
        self.sourceFormat = sourceFormat
        self.redeemedAt = redeemedAt
        self.clientAddress = clientAddress
        self.appAccountToken = appAccountToken
        self.status = status
        self.grantHash = grantHash
        self.replayKey = replayKey
    }

    /// The key the replay check uses: ``replayKey``, or the transaction id on older rows.
    public var effectiveReplayKey: String { replayKey ?? transactionId }

    /// The environment, typed; nil for text this build does not know. (The row keeps the text it
    /// was stored and hashed with: a row edited behind the server's back still loads, and the
    /// audit reports its hash, instead of failing to decode.)
    public var knownEnvironment: Environment? { Environment(rawValue: environment) }

    /// The status, typed; nil for text this build does not know.
    public var knownStatus: RedemptionStatus? { RedemptionStatus(rawValue: status) }
}

/// A refused redemption attempt: the fraud signal auditors look at.
public struct RejectedAttempt: Codable, Sendable, Hashable {
    public var sequence: Int64
    public var at: Date
    public var code: String
    public var detail: String
    public var transactionId: String?
    public var productId: String?
    public var receiptSHA256: String
    public var clientAddress: String
    /// True when `transactionId` / `productId` were read from a proof that did not verify (or
    /// sent by the client): claims, escaped and capped, not facts. False when they come from a
    /// verified proof. Nil on rows written before migration 0003.
    public var claimed: Bool?

    public init(
        sequence: Int64 = 0, at: Date, code: String, detail: String, transactionId: String?, productId: String?, receiptSHA256: String,
        clientAddress: String, claimed: Bool? = nil
    ) {
        self.sequence = sequence
        self.at = at
        self.code = code
        self.detail = detail
        self.transactionId = transactionId
        self.productId = productId
        self.receiptSHA256 = receiptSHA256
        self.clientAddress = clientAddress
        self.claimed = claimed
    }

    /// The code, typed; nil for text this build does not know.
    public var knownCode: ProblemCode? { ProblemCode(rawValue: code) }
}

/// Who an API key belongs to.
public enum Role: String, Codable, Sendable, Hashable, CaseIterable {
    case admin, auditor
}

/// An admin or auditor key. Only the SHA-256 of the secret is stored.
///
/// A key is used only when the ledger signing key signed it (``signature``, over
/// ``signedBytes``; ``LedgerSigner/signed(_:)``): whoever can write the database but does not
/// hold that key cannot mint a key or change a key's role (``isAuthentic(signedBy:)``).
public struct APIKey: Codable, Sendable, Hashable {
    public var keyId: String
    public var name: String
    public var role: Role
    public var secretHash: String
    public var createdAt: Date
    public var revokedAt: Date?
    /// Base64 Ed25519 signature of ``signedBytes`` by the ledger signing key; nil for a key made
    /// before keys were signed (SQLite migration 0006, PostgreSQL 0007), refused until
    /// `coffer keys adopt --sign ID` signs it.
    public var signature: String?

    public init(
        keyId: String, name: String, role: Role, secretHash: String, createdAt: Date, revokedAt: Date? = nil, signature: String? = nil
    ) {
        self.keyId = keyId
        self.name = name
        self.role = role
        self.secretHash = secretHash
        self.createdAt = createdAt
        self.revokedAt = revokedAt
        self.signature = signature
    }
}

/// Filters for audit queries. Results are in ledger order, after `after` (a cursor).
public struct AuditFilter: Sendable, Hashable {
    public var transactionId: String?
    public var originalTransactionId: String?
    public var productId: String?
    public var bundleId: String?
    public var code: String?
    public var from: Date?
    public var to: Date?
    /// Redemptions bound to this player (``Redemption/playerId``).
    public var playerId: String?
    public var after: Int64 = 0
    public var limit: Int = 100

    public init() {}
}

/// The outcome of a ledger insert.
public enum LedgerInsertOutcome: Sendable, Hashable {
    case inserted(Redemption)
    /// A redemption with the same replay key exists in the same environment.
    case alreadyRedeemed
    /// The purchase was refunded or revoked before it was redeemed (a kept revocation).
    case revoked(Revocation)
}

/// One admin action (upload, product change, key change): who, what, from where.
public struct AdminAction: Codable, Sendable, Hashable {
    public var sequence: Int64
    public var at: Date
    public var keyId: String
    public var keyName: String
    /// An ``AdminActionName`` raw value (stored and hashed as text; see ``name``).
    public var action: String
    public var target: String
    public var detail: String
    public var clientAddress: String

    public init(
        sequence: Int64 = 0, at: Date, keyId: String, keyName: String, action: String, target: String, detail: String, clientAddress: String
    ) {
        self.sequence = sequence
        self.at = at
        self.keyId = keyId
        self.keyName = keyName
        self.action = action
        self.target = target
        self.detail = detail
        self.clientAddress = clientAddress
    }

    public init(
        sequence: Int64 = 0, at: Date, keyId: String, keyName: String, action: AdminActionName, target: String, detail: String,
        clientAddress: String
    ) {
        self.init(
            sequence: sequence, at: at, keyId: keyId, keyName: keyName, action: action.rawValue, target: target, detail: detail,
            clientAddress: clientAddress)
    }

    /// The action, typed; nil for a name this build does not know.
    public var name: AdminActionName? { AdminActionName(rawValue: action) }
}

/// A redeemed transaction later refunded or revoked: appended to the ledger as its own
/// event (the redemption row is never edited).
public struct Revocation: Codable, Sendable, Hashable {
    public enum Source: String, Codable, Sendable, Hashable {
        /// A verified App Store Server Notification (REFUND, REVOKE).
        case notification
        /// An admin, through the API.
        case admin
    }

    public var sequence: Int64
    public var redemptionId: String
    public var transactionId: String
    /// When Apple (or the admin) says the purchase was revoked.
    public var revokedAt: Date
    /// The notification type and subtype, or the admin's reason.
    public var reason: String
    public var source: Source
    /// The notification UUID, or the admin key's name.
    public var reference: String
    public var recordedAt: Date
    /// The environment of the revoked purchase. Nil on rows written before migration 0003.
    public var environment: String?
    /// The replay key of the revoked purchase (see ``Redemption/replayKey``): a later
    /// redemption with this key in this environment is refused. Nil on older rows.
    public var replayKey: String?

    public init(
        sequence: Int64 = 0, redemptionId: String, transactionId: String, revokedAt: Date, reason: String, source: Source, reference: String,
        recordedAt: Date, environment: String? = nil, replayKey: String? = nil
    ) {
        self.sequence = sequence
        self.redemptionId = redemptionId
        self.transactionId = transactionId
        self.revokedAt = revokedAt
        self.reason = reason
        self.source = source
        self.reference = reference
        self.recordedAt = recordedAt
        self.environment = environment
        self.replayKey = replayKey
    }

    /// The environment, typed; nil on rows from before migration 0003 (and for unknown text).
    public var knownEnvironment: Environment? { environment.flatMap(Environment.init(rawValue:)) }
}

/// The outcome of recording a revocation.
public enum RevocationOutcome: Sendable, Hashable {
    /// A redemption was revoked: its grant stops working.
    case revoked(Revocation)
    /// No redemption of that purchase yet: the revocation is kept (`redemptionId` empty) and a
    /// later redemption of it is refused (410 `revoked`).
    case recordedUnredeemed(Revocation)
    /// No redemption of that purchase, and the caller asked not to keep one (`keepUnredeemed` false).
    case notRedeemed
    case alreadyRevoked
}
