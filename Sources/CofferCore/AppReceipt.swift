import Foundation

/// The decoded payload of a legacy App Store receipt (the ASN.1 SET inside the PKCS#7 envelope).
///
/// Empty strings are treated as absent; attribute types Coffer does not know are skipped.
public struct AppReceipt: Sendable, Hashable {
    /// Attribute 0: `Production`, `ProductionSandbox`, `Xcode`, `LocalTesting`, …
    public var receiptType: String?
    /// Attribute 1: the app's Apple ID (0 outside production).
    public var appAppleId: Int64?
    /// Attribute 2.
    public var bundleId: String?
    /// Attribute 3.
    public var appVersion: String?
    /// Attribute 4: opaque value used in the device hash.
    public var opaque: [UInt8]?
    /// Attribute 5: SHA-1(device identifier ‖ opaque ‖ raw attribute-2 bytes).
    public var sha1Hash: [UInt8]?
    /// Attribute 12.
    public var creationDate: Date?
    /// Attribute 17.
    public var inApp: [InAppPurchase] = []
    /// Attribute 19.
    public var originalAppVersion: String?
    /// Attribute 21.
    public var expirationDate: Date?
    /// The raw value bytes of attribute 2 (its DER UTF8String, header included): input to the device hash.
    public var bundleIdValueBytes: [UInt8]?

    public init() {}

    /// The environment the receipt claims (attribute 0), if recognised.
    public var environment: Environment? { receiptType.flatMap(Environment.init(claim:)) }
}

/// One in-app purchase record (attribute 17 of a receipt).
public struct InAppPurchase: Sendable, Hashable {
    /// Attribute 1701.
    public var quantity: Int64?
    /// Attribute 1702.
    public var productId: String?
    /// Attribute 1703.
    public var transactionId: String?
    /// Attribute 1705.
    public var originalTransactionId: String?
    /// Attribute 1704.
    public var purchaseDate: Date?
    /// Attribute 1706.
    public var originalPurchaseDate: Date?
    /// Attribute 1708: the subscription expiration date (auto-renewable subscriptions only;
    /// nil — an empty string in the receipt — for other products).
    public var expiresDate: Date?
    /// Attribute 1711: present on subscription purchases.
    public var webOrderLineItemId: Int64?
    /// Attribute 1712: set when Apple refunded or revoked the purchase.
    public var cancellationDate: Date?
    /// Attribute 1719.
    public var isInIntroOfferPeriod: Bool?

    public init() {}
}

extension AppReceipt {
    /// Decodes a receipt payload. Throws ``VerificationError`` with code `malformed` or
    /// `limitExceeded` for anything that is not a well-formed receipt.
    public static func decode(_ bytes: ArraySlice<UInt8>, limits: VerificationLimits = .init()) throws(VerificationError) -> AppReceipt {
        var receipt = AppReceipt()
        var seen: UInt32 = 0
        var elements = 0
        try forEachAttribute(of: bytes, "receipt payload", trailing: "the receipt payload", limits: limits, elements: &elements) {
            (type, value, elements) throws(VerificationError) in
            switch type {
            case 0, 1, 2, 3, 4, 5, 12, 19, 21:
                let bit: UInt32 = 1 << UInt32(type)
                guard seen & bit == 0 else { throw VerificationError(.malformed, "receipt attribute \(type) appears twice") }
                seen |= bit
            default: break
            }
            switch type {
            case 0: receipt.receiptType = try string(value, type)
            case 1: receipt.appAppleId = try integer(value, type)
            case 2:
                receipt.bundleId = try string(value, type)
                receipt.bundleIdValueBytes = Array(value)
            case 3: receipt.appVersion = try string(value, type)
            case 4: receipt.opaque = Array(value)
            case 5: receipt.sha1Hash = Array(value)
            case 12: receipt.creationDate = try date(value, type)
            case 17:
                guard receipt.inApp.count < limits.maxInAppRecords else {
                    throw VerificationError(.limitExceeded, "more than \(limits.maxInAppRecords) in-app records")
                }
                receipt.inApp.append(try inAppPurchase(value, limits: limits, elements: &elements))
            case 19: receipt.originalAppVersion = try string(value, type)
            case 21: receipt.expirationDate = try date(value, type)
            default: break
            }
        }
        return receipt
    }

    private static func inAppPurchase(
        _ bytes: ArraySlice<UInt8>, limits: VerificationLimits, elements: inout Int
    ) throws(VerificationError) -> InAppPurchase {
        var purchase = InAppPurchase()
        var seen: UInt32 = 0
        try forEachAttribute(of: bytes, "in-app record", trailing: "an in-app record", limits: limits, elements: &elements) {
            (type, value, _) throws(VerificationError) in
            // As for the payload's own: a second value of an attribute read here would silently
            // replace the first (an empty 1712 after a refund date would clear it).
            switch type {
            case 1701, 1702, 1703, 1704, 1705, 1706, 1708, 1711, 1712, 1719:
                let bit: UInt32 = 1 << UInt32(type - 1700)
                guard seen & bit == 0 else { throw VerificationError(.malformed, "in-app attribute \(type) appears twice") }
                seen |= bit
            default: break
            }
            switch type {
            case 1701: purchase.quantity = try integer(value, type)
            case 1702: purchase.productId = try string(value, type)
            case 1703: purchase.transactionId = try string(value, type)
            case 1704: purchase.purchaseDate = try date(value, type)
            case 1705: purchase.originalTransactionId = try string(value, type)
            case 1706: purchase.originalPurchaseDate = try date(value, type)
            case 1708: purchase.expiresDate = try date(value, type)
            case 1711: purchase.webOrderLineItemId = try integer(value, type)
            case 1712: purchase.cancellationDate = try date(value, type)
            case 1719: purchase.isInIntroOfferPeriod = try integer(value, type).map { $0 != 0 }
            default: break
            }
        }
        return purchase
    }

    /// Walks the attribute SET that is all of `bytes` (`what` names it in errors), counting
    /// every attribute against `limits.maxElements` (in-app records count into the receipt's total).
    private static func forEachAttribute(
        of bytes: ArraySlice<UInt8>, _ what: String, trailing: String, limits: VerificationLimits, elements: inout Int,
        _ body: (Int, ArraySlice<UInt8>, inout Int) throws(VerificationError) -> Void
    ) throws(VerificationError) {
        var outer = DERCursor(bytes)
        let set = try outer.next(tag: 0x31, what)
        guard outer.isAtEnd else { throw VerificationError(.malformed, "trailing bytes after \(trailing)") }
        var reader = outer.children(of: set)
        while !reader.isAtEnd {
            let (type, value) = try attribute(&reader)
            elements += 1
            guard elements <= limits.maxElements else {
                throw VerificationError(.limitExceeded, "more than \(limits.maxElements) receipt attributes")
            }
            try body(type, value, &elements)
        }
    }

    /// Reads `SEQUENCE { type INTEGER, version INTEGER, value OCTET STRING }`.
    private static func attribute(_ reader: inout DERCursor) throws(VerificationError) -> (Int, ArraySlice<UInt8>) {
        var fields = reader.children(of: try reader.next(tag: 0x30, "receipt attribute"))
        let typeTLV = try fields.next(tag: 0x02, "receipt attribute type")
        _ = try fields.next(tag: 0x02, "receipt attribute version")
        let value = try fields.next(tag: 0x04, "receipt attribute value")
        guard fields.isAtEnd else { throw VerificationError(.malformed, "receipt attribute has extra fields") }
        guard let type = try integerValue(fields.value(typeTLV)), let small = Int(exactly: type) else {
            throw VerificationError(.malformed, "receipt attribute type is empty")
        }
        return (small, fields.value(value))
    }

    /// The single element an attribute value holds: its tag and content.
    private static func single(_ bytes: ArraySlice<UInt8>, _ type: Int) throws(VerificationError) -> (UInt8, ArraySlice<UInt8>) {
        var reader = DERCursor(bytes)
        let tlv: TLV
        do { tlv = try reader.next() } catch { throw VerificationError(.malformed, "attribute \(type): \(error.detail)") }
        guard reader.isAtEnd, tlv.valueEnd == tlv.end else { throw VerificationError(.malformed, "attribute \(type) has trailing bytes") }
        return (tlv.tag, reader.value(tlv))
    }

    /// UTF8String, IA5String or PrintableString content; empty means absent.
    static func stringBytes(_ bytes: ArraySlice<UInt8>, _ type: Int) throws(VerificationError) -> ArraySlice<UInt8>? {
        let (tag, value) = try single(bytes, type)
        guard tag == 0x0C || tag == 0x16 || tag == 0x13 else {
            throw VerificationError(.malformed, "attribute \(type) is not a string (tag 0x\(String(tag, radix: 16)))")
        }
        return value.isEmpty ? nil : value
    }

    static func string(_ bytes: ArraySlice<UInt8>, _ type: Int) throws(VerificationError) -> String? {
        guard let value = try stringBytes(bytes, type) else { return nil }
        guard let text = String(validating: value, as: UTF8.self) else {
            throw VerificationError(.malformed, "attribute \(type) is not valid UTF-8")
        }
        return text
    }

    static func integer(_ bytes: ArraySlice<UInt8>, _ type: Int) throws(VerificationError) -> Int64? {
        let (tag, value) = try single(bytes, type)
        guard tag == 0x02 else { throw VerificationError(.malformed, "attribute \(type) is not an INTEGER") }
        return try integerValue(value)
    }

    static func integerValue(_ bytes: ArraySlice<UInt8>) throws(VerificationError) -> Int64? {
        guard let first = bytes.first else { return nil }
        guard bytes.count <= 8 else { throw VerificationError(.malformed, "INTEGER wider than 64 bits") }
        var value: Int64 = first & 0x80 != 0 ? -1 : 0
        for byte in bytes { value = (value << 8) | Int64(byte) }
        return value
    }

    static func date(_ bytes: ArraySlice<UInt8>, _ type: Int) throws(VerificationError) -> Date? {
        guard let value = try stringBytes(bytes, type) else { return nil }
        guard let date = RFC3339.parse(bytes: value) else {
            throw VerificationError(.malformed, "attribute \(type) is not an RFC 3339 date: \(String(decoding: value.prefix(40), as: UTF8.self))")
        }
        return date
    }
}
