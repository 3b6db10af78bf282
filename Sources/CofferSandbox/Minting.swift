import CofferCore
import Crypto
import Foundation
import SwiftASN1
import X509
import _CryptoExtras

/// One in-app purchase record to put in a sandbox receipt.
public struct PurchaseSpec: Sendable, Hashable {
    public var productId: String
    public var transactionId: String
    public var originalTransactionId: String?
    public var purchaseDate: Date?
    public var originalPurchaseDate: Date?
    public var expiresDate: Date?
    public var cancellationDate: Date?
    public var quantity: Int64 = 1
    public var webOrderLineItemId: Int64?

    public init(productId: String, transactionId: String) {
        self.productId = productId
        self.transactionId = transactionId
    }
}

/// A sandbox legacy receipt's contents.
public struct ReceiptSpec: Sendable {
    public var bundleId: String
    public var appVersion = "1.0"
    public var originalAppVersion = "1.0"
    public var environment: Environment = .localTesting
    /// Defaults to the `now` passed to ``SandboxCA/mintReceipt(_:now:options:)``.
    public var creationDate: Date?
    public var expirationDate: Date?
    public var appAppleId: Int64 = 0
    /// When set, attribute 5 is SHA-1(device ‖ opaque ‖ bundle-id bytes), as on a device.
    public var deviceIdentifier: [UInt8]?
    public var purchases: [PurchaseSpec]

    public init(bundleId: String, purchases: [PurchaseSpec]) {
        self.bundleId = bundleId
        self.purchases = purchases
    }
}

/// How to wrap a sandbox receipt. The non-default knobs build negative fixtures.
public struct ReceiptEncoding: Sendable {
    public var ber = false
    /// With `ber`: the payload OCTET STRING is split into chunks of this many bytes.
    public var chunkSize = 1000
    public var digest: DigestAlgorithm = .sha256
    /// Sign over CMS signed attributes (contentType + messageDigest) instead of the content.
    public var signedAttributes = false
    /// Test knob: a wrong messageDigest attribute.
    public var corruptMessageDigest = false
    /// Test knob: name the intermediate as the signer.
    public var signerIsIntermediate = false
    /// Test knobs for envelope fields outside the signed bytes (each must be refused).
    public var signedDataVersion: Int64 = 1
    public var signerInfoVersion: Int64 = 1
    /// Declare these digests in SignedData.digestAlgorithms besides the signer's.
    public var extraDigestAlgorithms: [DigestAlgorithm] = []
    /// SignerInfo.signatureAlgorithm `shaNNNWithRSAEncryption` (matching the digest) instead of `rsaEncryption`.
    public var signatureAlgorithmNamesDigest = false
    /// An (empty) `crls [1]` field.
    public var crls = false
    /// An `unsignedAttrs [1]` field in the SignerInfo.
    public var unsignedAttributes = false
    /// Carry the intermediate twice.
    public var duplicateIntermediate = false
    /// Carry these DER elements too, after the root (each must be refused).
    public var extraCertificates: [[UInt8]] = []
    public init() {}
}

extension SandboxCA {
    static func receiptType(_ environment: Environment) -> String {
        switch environment {
        case .production: "Production"
        case .sandbox: "ProductionSandbox"
        case .xcode: "Xcode"
        case .localTesting: "LocalTesting"
        }
    }

    /// The DER receipt payload (the SET of attributes).
    public static func receiptPayload(_ spec: ReceiptSpec, now: Date) -> [UInt8] {
        func attribute(_ type: Int64, _ value: ASN1Value) -> ASN1Value {
            .sequence([.integer(type), .integer(1), .octetString(value.encoded(ber: false))])
        }
        func date(_ d: Date?) -> ASN1Value { .ia5String(d.map(RFC3339.format) ?? "") }
        let bundleValue = ASN1Value.utf8String(spec.bundleId).encoded(ber: false)
        var opaque = [UInt8](repeating: 0, count: 16)
        var rng = SystemRandomNumberGenerator()
        for i in opaque.indices { opaque[i] = UInt8.random(in: 0...255, using: &rng) }
        var hash = [UInt8](repeating: 0, count: 20)
        for i in hash.indices { hash[i] = UInt8.random(in: 0...255, using: &rng) }
        if let device = spec.deviceIdentifier {
            var sha1 = Insecure.SHA1()
            sha1.update(data: device)
            sha1.update(data: opaque)
            sha1.update(data: bundleValue)
            hash = Array(sha1.finalize())
        }
        var attributes: [ASN1Value] = [
            attribute(0, .utf8String(receiptType(spec.environment))),
            attribute(1, .integer(spec.appAppleId)),
            .sequence([.integer(2), .integer(1), .octetString(bundleValue)]),
            attribute(3, .utf8String(spec.appVersion)),
            .sequence([.integer(4), .integer(1), .octetString(opaque)]),
            .sequence([.integer(5), .integer(1), .octetString(hash)]),
            attribute(12, date(spec.creationDate ?? now)),
            attribute(19, .utf8String(spec.originalAppVersion)),
        ]
        if let expiration = spec.expirationDate { attributes.append(attribute(21, date(expiration))) }
        for p in spec.purchases {
            var fields: [ASN1Value] = [
                attribute(1701, .integer(p.quantity)),
                attribute(1702, .utf8String(p.productId)),
                attribute(1703, .utf8String(p.transactionId)),
                attribute(1704, date(p.purchaseDate ?? now)),
                attribute(1705, .utf8String(p.originalTransactionId ?? p.transactionId)),
                attribute(1706, date(p.originalPurchaseDate ?? p.purchaseDate ?? now)),
                attribute(1708, date(p.expiresDate)),
                attribute(1712, date(p.cancellationDate)),
            ]
            if let web = p.webOrderLineItemId { fields.append(attribute(1711, .integer(web))) }
            attributes.append(.sequence([.integer(17), .integer(1), .octetString(ASN1Value.set(fields).encoded(ber: false))]))
        }
        return ASN1Value.set(attributes).encoded(ber: false)
    }

    /// DER INTEGER content for an unsigned magnitude (a leading 0x00 keeps it positive).
    static func integerContent(_ magnitude: ArraySlice<UInt8>) -> [UInt8] {
        let trimmed = Array(magnitude.drop(while: { $0 == 0 }))
        guard let first = trimmed.first else { return [0] }
        return first & 0x80 != 0 ? [0] + trimmed : trimmed
    }

    /// Mints a PKCS#7 receipt signed by the sandbox receipt leaf.
    public func mintReceipt(_ spec: ReceiptSpec, now: Date, encoding: ReceiptEncoding = .init()) throws -> [UInt8] {
        try wrapReceipt(payload: Self.receiptPayload(spec, now: now), encoding: encoding)
    }

    /// Wraps any payload bytes in a signed PKCS#7 envelope.
    public func wrapReceipt(payload: [UInt8], encoding: ReceiptEncoding = .init()) throws -> [UInt8] {
        var certificates: [ASN1Value] = [.raw(try Self.der(receiptSigner)), .raw(try Self.der(intermediate))]
        if encoding.duplicateIntermediate { certificates.append(.raw(try Self.der(intermediate))) }
        certificates.append(.raw(try Self.der(root)))
        certificates += encoding.extraCertificates.map { .raw($0) }
        var signedDataFields: [ASN1Value] = [
            .integer(encoding.signedDataVersion),
            .set([.sequence([.oid(encoding.digest.oid), .null])] + encoding.extraDigestAlgorithms.map { .sequence([.oid($0.oid), .null]) }),
            .sequence([
                .oid([1, 2, 840, 113549, 1, 7, 1]),
                .constructed(tag: 0xA0, children: [.chunkedOctetString(payload, chunkSize: max(1, encoding.chunkSize))]),
            ]),
            .constructed(tag: 0xA0, children: certificates),
        ]
        if encoding.crls { signedDataFields.append(.constructed(tag: 0xA1, children: [])) }
        signedDataFields.append(.set([try signerInfo(payload: payload, encoding: encoding)]))
        let contentInfo = ASN1Value.sequence([
            .oid([1, 2, 840, 113549, 1, 7, 2]),
            .constructed(tag: 0xA0, children: [.sequence(signedDataFields)]),
        ])
        return contentInfo.encoded(ber: encoding.ber)
    }

    /// The SignerInfo over `payload`: the receipt key's RSA PKCS#1 v1.5 signature of the
    /// payload, or of the signed attributes (content type, message digest) when the encoding has them.
    func signerInfo(payload: [UInt8], encoding: ReceiptEncoding) throws -> ASN1Value {
        var toSign = payload
        var signedAttributes: [UInt8]?
        if encoding.signedAttributes {
            var messageDigest = encoding.digest.hash(payload)
            if encoding.corruptMessageDigest { messageDigest[0] ^= 0xFF }
            let attrs = ASN1Value.set([
                .sequence([.oid([1, 2, 840, 113549, 1, 9, 3]), .set([.oid([1, 2, 840, 113549, 1, 7, 1])])]),
                .sequence([.oid([1, 2, 840, 113549, 1, 9, 4]), .set([.octetString(messageDigest)])]),
            ]).encoded(ber: false)
            signedAttributes = attrs
            toSign = attrs
        }
        let signature = try encoding.digest.sign(toSign, with: receiptKey)
        let signerCert = encoding.signerIsIntermediate ? intermediate : receiptSigner
        var issuerSerializer = DER.Serializer()
        try issuerSerializer.serialize(signerCert.issuer)
        let sid = ASN1Value.sequence([
            .raw(issuerSerializer.serializedBytes),
            .primitive(tag: 0x02, bytes: Self.integerContent(signerCert.serialNumber.bytes)),
        ])
        var signerFields: [ASN1Value] = [.integer(encoding.signerInfoVersion), sid, .sequence([.oid(encoding.digest.oid), .null])]
        if let signedAttributes { signerFields.append(.raw([0xA0] + signedAttributes.dropFirst())) }
        let signatureOID: [UInt] =
            switch (encoding.signatureAlgorithmNamesDigest, encoding.digest) {
            case (false, _): [1, 2, 840, 113549, 1, 1, 1]
            case (true, .sha1): [1, 2, 840, 113549, 1, 1, 5]
            case (true, .sha256): [1, 2, 840, 113549, 1, 1, 11]
            case (true, .sha384): [1, 2, 840, 113549, 1, 1, 12]
            case (true, .sha512): [1, 2, 840, 113549, 1, 1, 13]
            }
        signerFields += [.sequence([.oid(signatureOID), .null]), .octetString(Array(signature.rawRepresentation))]
        if encoding.unsignedAttributes {
            // One attribute: 1.2.840.113549.1.9.6 (countersignature) holding an empty SET member.
            signerFields.append(.constructed(tag: 0xA1, children: [.sequence([.oid([1, 2, 840, 113549, 1, 9, 6]), .set([.null])])]))
        }
        return .sequence(signerFields)
    }
}

extension DigestAlgorithm {
    /// The algorithm's OID arcs.
    var oid: [UInt] {
        switch self {
        case .sha1: [1, 3, 14, 3, 2, 26]
        case .sha256: [2, 16, 840, 1, 101, 3, 4, 2, 1]
        case .sha384: [2, 16, 840, 1, 101, 3, 4, 2, 2]
        case .sha512: [2, 16, 840, 1, 101, 3, 4, 2, 3]
        }
    }

    func hash(_ bytes: [UInt8]) -> [UInt8] {
        switch self {
        case .sha1: Array(Insecure.SHA1.hash(data: bytes))
        case .sha256: Array(SHA256.hash(data: bytes))
        case .sha384: Array(SHA384.hash(data: bytes))
        case .sha512: Array(SHA512.hash(data: bytes))
        }
    }

    /// RSA PKCS#1 v1.5 over this digest of `bytes`.
    func sign(_ bytes: [UInt8], with key: _RSA.Signing.PrivateKey) throws -> _RSA.Signing.RSASignature {
        switch self {
        case .sha1: try key.signature(for: Insecure.SHA1.hash(data: bytes), padding: .insecurePKCS1v1_5)
        case .sha256: try key.signature(for: SHA256.hash(data: bytes), padding: .insecurePKCS1v1_5)
        case .sha384: try key.signature(for: SHA384.hash(data: bytes), padding: .insecurePKCS1v1_5)
        case .sha512: try key.signature(for: SHA512.hash(data: bytes), padding: .insecurePKCS1v1_5)
        }
    }
}

/// A sandbox StoreKit 2 transaction's contents.
public struct TransactionSpec: Sendable {
    public var bundleId: String
    public var productId: String
    public var transactionId: String
    public var originalTransactionId: String?
    public var purchaseDate: Date?
    /// Subscriptions: when the period ends (`expiresDate`).
    public var expiresDate: Date?
    public var revocationDate: Date?
    public var environment: Environment = .localTesting
    /// "Non-Consumable", "Consumable", "Auto-Renewable Subscription" or "Non-Renewing Subscription".
    public var type = "Non-Consumable"
    public var quantity = 1
    public var appAccountToken: String?
    /// PURCHASED or FAMILY_SHARED.
    public var ownershipType = "PURCHASED"
    /// A subscription transaction replaced by an upgrade.
    public var isUpgraded = false
    /// REFUND_FULL, REFUND_PRORATED or FAMILY_REVOKE (with `revocationDate`).
    public var revocationType: String?
    /// A prorated refund's share, thousandths of a percent.
    public var revocationPercentage: Int?

    public init(bundleId: String, productId: String, transactionId: String) {
        self.bundleId = bundleId
        self.productId = productId
        self.transactionId = transactionId
    }
}

/// Signed renewal info of an auto-renewable subscription (`JWSRenewalInfoDecodedPayload`).
public struct RenewalSpec: Sendable {
    public var productId: String
    public var originalTransactionId: String
    public var environment: Environment = .localTesting
    public var autoRenew = true
    /// When the next period starts (the current period's end).
    public var renewalDate: Date?
    public var recentStart: Date?
    /// A billing grace period's end (DID_FAIL_TO_RENEW / GRACE_PERIOD).
    public var gracePeriodExpiresDate: Date?
    public var isInBillingRetryPeriod = false
    /// 1 cancelled, 2 billing error, …
    public var expirationIntent: Int?

    public init(productId: String, originalTransactionId: String) {
        self.productId = productId
        self.originalTransactionId = originalTransactionId
    }
}

/// How to sign a sandbox JWS. The non-default knobs build negative fixtures.
public struct JWSEncoding: Sendable {
    public var alg = "ES256"
    /// One of the CA's certificates (and its key), or any certificate's DER bytes (x5c only).
    public enum Part: Sendable, Hashable { case leaf, intermediate, root, der([UInt8]) }
    /// Which certificates go in x5c, in order.
    public enum Chain: Sendable, Hashable {
        case standard, leafOnly, leafAndIntermediate, withExtra, swapped, none
        /// Any sequence of the CA's certificates.
        case parts([Part])
    }
    public var chain: Chain = .standard
    /// Whose key signs: the JWS leaf normally; a CA key for negative fixtures.
    public var signer: Part = .leaf
    public init() {}
}

extension SandboxCA {
    /// Signs any JSON payload as a compact JWS with the sandbox P-256 leaf.
    public func signJWS(payload: [UInt8], encoding: JWSEncoding = .init()) throws -> String {
        func der(_ part: JWSEncoding.Part) throws -> String {
            switch part {
            case .leaf: try Self.der(jwsSigner).base64()
            case .intermediate: try Self.der(intermediate).base64()
            case .root: try Self.der(root).base64()
            case .der(let bytes): bytes.base64()
            }
        }
        let x5c: [String]?
        switch encoding.chain {
        case .standard: x5c = try [der(.leaf), der(.intermediate), der(.root)]
        case .leafOnly: x5c = try [der(.leaf)]
        case .leafAndIntermediate: x5c = try [der(.leaf), der(.intermediate)]
        case .withExtra: x5c = try [der(.leaf), der(.intermediate), der(.root), der(.root)]
        case .swapped: x5c = try [der(.intermediate), der(.leaf), der(.root)]
        case .none: x5c = nil
        case .parts(let parts): x5c = try parts.map(der)
        }
        var header: [String: Any] = ["alg": encoding.alg]
        if let x5c { header["x5c"] = x5c }
        let headerJSON = try JSONSerialization.data(withJSONObject: header, options: [.sortedKeys])
        let signingInput = Base64.encodeURL(headerJSON) + "." + Base64.encodeURL(payload)
        let key: P256.Signing.PrivateKey
        switch encoding.signer {
        case .leaf: key = jwsKey
        case .intermediate: key = intermediateKey
        case .root: key = rootKey
        case .der: throw SigningKeyUnavailable()
        }
        let signature = try key.signature(for: SHA256.hash(data: Array(signingInput.utf8)))
        return signingInput + "." + Base64.encodeURL(signature.rawRepresentation)
    }

    static func milliseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }

    public static func transactionPayload(_ spec: TransactionSpec, now: Date) throws -> [UInt8] {
        var object: [String: Any] = [
            "transactionId": spec.transactionId,
            "originalTransactionId": spec.originalTransactionId ?? spec.transactionId,
            "bundleId": spec.bundleId,
            "productId": spec.productId,
            "purchaseDate": milliseconds(spec.purchaseDate ?? now),
            "originalPurchaseDate": milliseconds(spec.purchaseDate ?? now),
            "quantity": spec.quantity,
            "type": spec.type,
            "inAppOwnershipType": spec.ownershipType,
            "signedDate": milliseconds(now),
            "environment": spec.environment.rawValue,
            "transactionReason": "PURCHASE",
            "storefront": "USA",
            "storefrontId": "143441",
        ]
        if let expires = spec.expiresDate { object["expiresDate"] = milliseconds(expires) }
        if let revocation = spec.revocationDate {
            object["revocationDate"] = milliseconds(revocation)
            object["revocationReason"] = 0
        }
        if let token = spec.appAccountToken { object["appAccountToken"] = token }
        if spec.isUpgraded { object["isUpgraded"] = true }
        if let type = spec.revocationType { object["revocationType"] = type }
        if let share = spec.revocationPercentage { object["revocationPercentage"] = share }
        if spec.expiresDate != nil && spec.type == "Auto-Renewable Subscription" {
            object["webOrderLineItemId"] = spec.transactionId + "0"
            object["subscriptionGroupIdentifier"] = "21000000"
            object["transactionReason"] = spec.originalTransactionId.map { $0 != spec.transactionId } == true ? "RENEWAL" : "PURCHASE"
        }
        return Array(try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]))
    }

    public static func renewalPayload(_ spec: RenewalSpec, now: Date) throws -> [UInt8] {
        var object: [String: Any] = [
            "originalTransactionId": spec.originalTransactionId,
            "autoRenewProductId": spec.productId,
            "productId": spec.productId,
            "autoRenewStatus": spec.autoRenew ? 1 : 0,
            "signedDate": milliseconds(now),
            "environment": spec.environment.rawValue,
            "recentSubscriptionStartDate": milliseconds(spec.recentStart ?? now),
        ]
        if let renewal = spec.renewalDate { object["renewalDate"] = milliseconds(renewal) }
        if let grace = spec.gracePeriodExpiresDate { object["gracePeriodExpiresDate"] = milliseconds(grace) }
        if spec.isInBillingRetryPeriod { object["isInBillingRetryPeriod"] = true }
        if let intent = spec.expirationIntent { object["expirationIntent"] = intent }
        return Array(try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]))
    }

    /// Mints signed renewal info (compact JWS).
    public func mintRenewalInfo(_ spec: RenewalSpec, now: Date) throws -> String {
        try signJWS(payload: Self.renewalPayload(spec, now: now))
    }

    /// Mints a signed transaction (compact JWS).
    public func mintTransaction(_ spec: TransactionSpec, now: Date, encoding: JWSEncoding = .init()) throws -> String {
        try signJWS(payload: Self.transactionPayload(spec, now: now), encoding: encoding)
    }

    /// Mints an App Store Server Notification V2 whose `signedTransactionInfo` is a separate JWS.
    /// REFUND and REVOKE notifications carry a `revocationDate` on the nested transaction.
    /// Subscription notifications carry signed renewal info too (`renewal`, or one derived
    /// from the transaction when it has an `expiresDate`).
    public func mintNotification(
        type: String, subtype: String? = nil, transaction spec: TransactionSpec, renewal: RenewalSpec? = nil, appAppleId: Int64? = nil,
        notificationUUID: String? = nil, now: Date
    ) throws -> String {
        var spec = spec
        if ["REFUND", "REVOKE"].contains(type.uppercased()) && spec.revocationDate == nil { spec.revocationDate = now }
        let inner = try mintTransaction(spec, now: now)
        var data: [String: Any] = [
            "bundleId": spec.bundleId,
            "bundleVersion": "1",
            "environment": spec.environment.rawValue,
            "signedTransactionInfo": inner,
        ]
        var renewalSpec = renewal
        if renewalSpec == nil, spec.expiresDate != nil {
            var derived = RenewalSpec(productId: spec.productId, originalTransactionId: spec.originalTransactionId ?? spec.transactionId)
            derived.environment = spec.environment
            derived.renewalDate = spec.expiresDate
            derived.autoRenew = !["EXPIRED", "GRACE_PERIOD_EXPIRED"].contains(type.uppercased())
            renewalSpec = derived
        }
        if let renewalSpec { data["signedRenewalInfo"] = try mintRenewalInfo(renewalSpec, now: now) }
        if let appAppleId { data["appAppleId"] = appAppleId }
        var object: [String: Any] = [
            "notificationType": type.uppercased(),
            "notificationUUID": notificationUUID ?? UUID().uuidString.lowercased(),
            "version": "2.0",
            "signedDate": Self.milliseconds(now),
            "data": data,
        ]
        if let subtype { object["subtype"] = subtype }
        return try signJWS(payload: Array(JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])))
    }
}

/// A JWS signer must be one of the CA's own keys.
public struct SigningKeyUnavailable: Error {}

extension Array where Element == UInt8 {
    func base64() -> String { Data(self).base64EncodedString() }
}
