import Foundation

/// Milliseconds since 1970 as App Store Server API JSON writes them (integers, or
/// fractional numbers in Xcode data), decoded to `Date`.
public struct MillisecondDate: Codable, Sendable, Hashable {
    public var date: Date
    public init(_ date: Date) { self.date = date }
    public init(from decoder: Decoder) throws {
        let milliseconds = try decoder.singleValueContainer().decode(Double.self)
        guard milliseconds.isFinite, abs(milliseconds) < 1e15 else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "date out of range"))
        }
        date = Date(timeIntervalSince1970: milliseconds / 1000)
    }
    public func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode((date.timeIntervalSince1970 * 1000).rounded())
    }
}

/// A StoreKit 2 signed transaction payload (`JWSTransactionDecodedPayload`).
public struct SignedTransaction: Codable, Sendable, Hashable {
    public var transactionId: String?
    public var originalTransactionId: String?
    public var webOrderLineItemId: String?
    public var bundleId: String?
    public var productId: String?
    public var subscriptionGroupIdentifier: String?
    public var purchaseDate: MillisecondDate?
    public var originalPurchaseDate: MillisecondDate?
    public var expiresDate: MillisecondDate?
    public var quantity: Int?
    public var type: String?
    public var appAccountToken: String?
    public var inAppOwnershipType: String?
    public var signedDate: MillisecondDate?
    public var revocationReason: Int?
    public var revocationDate: MillisecondDate?
    /// REFUND_FULL, REFUND_PRORATED or FAMILY_REVOKE.
    public var revocationType: String?
    /// A prorated refund's share in thousandths of a percent (50000 is 50 %).
    public var revocationPercentage: Int?
    public var isUpgraded: Bool?
    public var offerType: Int?
    public var offerIdentifier: String?
    public var environment: String?
    public var storefront: String?
    public var storefrontId: String?
    public var transactionReason: String?
    public var currency: String?
    public var price: Int64?
    public var appTransactionId: String?

    public init() {}
}

/// A StoreKit 2 signed renewal info payload (`JWSRenewalInfoDecodedPayload`).
public struct SignedRenewalInfo: Codable, Sendable, Hashable {
    public var originalTransactionId: String?
    public var autoRenewProductId: String?
    public var productId: String?
    public var autoRenewStatus: Int?
    public var expirationIntent: Int?
    public var gracePeriodExpiresDate: MillisecondDate?
    public var isInBillingRetryPeriod: Bool?
    public var offerIdentifier: String?
    public var offerType: Int?
    public var priceIncreaseStatus: Int?
    public var signedDate: MillisecondDate?
    public var environment: String?
    public var recentSubscriptionStartDate: MillisecondDate?
    public var renewalDate: MillisecondDate?
    public var currency: String?
    public var renewalPrice: Int64?
    public var appTransactionId: String?
}

/// A StoreKit 2 signed app transaction payload.
public struct SignedAppTransaction: Codable, Sendable, Hashable {
    public var receiptType: String?
    public var appAppleId: Int64?
    public var bundleId: String?
    public var applicationVersion: String?
    public var receiptCreationDate: MillisecondDate?
    public var originalPurchaseDate: MillisecondDate?
    public var originalApplicationVersion: String?
    public var preorderDate: MillisecondDate?
    public var appTransactionId: String?
    public var originalPlatform: String?
    public var signedDate: MillisecondDate?
}

/// An App Store Server Notification V2 payload (`responseBodyV2DecodedPayload`).
public struct SignedNotification: Codable, Sendable, Hashable {
    public struct NotificationData: Codable, Sendable, Hashable {
        public var appAppleId: Int64?
        public var bundleId: String?
        public var bundleVersion: String?
        public var environment: String?
        public var signedTransactionInfo: String?
        public var signedRenewalInfo: String?
        public var status: Int?
    }
    public struct Summary: Codable, Sendable, Hashable {
        public var appAppleId: Int64?
        public var bundleId: String?
        public var environment: String?
    }
    public var notificationType: String?
    public var subtype: String?
    public var notificationUUID: String?
    public var version: String?
    public var signedDate: MillisecondDate?
    public var data: NotificationData?
    public var summary: Summary?

    /// Verified nested payloads (filled in by the verifier, not decoded from JSON).
    public var transaction: SignedTransaction? = nil
    public var renewalInfo: SignedRenewalInfo? = nil

    enum CodingKeys: String, CodingKey {
        case notificationType, subtype, notificationUUID, version, signedDate, data, summary
    }
}

/// What a JWS carries, classified by its payload's fields.
public enum SignedPayload: Sendable, Hashable {
    case transaction(SignedTransaction)
    case renewalInfo(SignedRenewalInfo)
    case appTransaction(SignedAppTransaction)
    case notification(SignedNotification)

    public var kind: PayloadKind {
        switch self {
        case .transaction: .transaction
        case .renewalInfo: .renewalInfo
        case .appTransaction: .appTransaction
        case .notification: .notification
        }
    }
}

/// The kind of signed data a verification was about.
public enum PayloadKind: String, Sendable, Hashable, Codable {
    case appReceipt, transaction, renewalInfo, appTransaction, notification
}

/// Apple's product types, as a signed transaction's `type` names them.
public enum AppStoreProductType: String, Sendable, Hashable, Codable, CaseIterable {
    case autoRenewableSubscription = "Auto-Renewable Subscription"
    case nonConsumable = "Non-Consumable"
    case consumable = "Consumable"
    case nonRenewingSubscription = "Non-Renewing Subscription"
}

extension SignedTransaction {
    /// ``type`` when it is one of Apple's four product types (nil when absent or unknown).
    /// Subscriptions carry ``expiresDate``: an auto-renewable transaction past it no longer
    /// entitles anything.
    public var productType: AppStoreProductType? { type.flatMap(AppStoreProductType.init(rawValue:)) }
}
