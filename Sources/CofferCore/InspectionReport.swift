import Foundation

/// The JSON document `coffer receipt inspect --json` prints: one object describing the
/// verdict and everything decoded. Dates are ISO 8601 UTC; absent fields are omitted.
public enum InspectionReport {
    public static func object(_ result: VerificationResult) -> [String: Any] {
        let evidence = result.evidence
        var out: [String: Any] = ["verdict": result.isValid ? "valid" : "invalid"]
        if let kind = evidence.kind { out["kind"] = kind.rawValue }
        if let environment = evidence.environment { out["environment"] = environment.rawValue }
        if let error = result.error { out["error"] = ["code": error.code.rawValue, "detail": error.detail] }
        if let signing = evidence.signing {
            out["signing"] = ["digest": signing.digest, "chain": signing.chain, "validatedAt": RFC3339.format(signing.validatedAt)]
        }
        if let receipt = evidence.receipt { out["receipt"] = object(receipt) }
        if let payload = evidence.payloadJSON, let decoded = decodeJSON(payload) { out["payload"] = expandNested(decoded) }
        return out
    }

    /// Serialises the report (sorted keys, no escaped slashes).
    public static func json(_ result: VerificationResult) -> String {
        let object = object(result)
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes, .prettyPrinted]) else {
            return #"{"verdict":"invalid","error":{"code":"malformed","detail":"report could not be serialised"}}"#
        }
        return String(decoding: data, as: UTF8.self)
    }

    static func object(_ receipt: AppReceipt) -> [String: Any] {
        var out: [String: Any] = [:]
        out["receiptType"] = receipt.receiptType
        out["appAppleId"] = receipt.appAppleId
        out["bundleId"] = receipt.bundleId
        out["appVersion"] = receipt.appVersion
        out["originalAppVersion"] = receipt.originalAppVersion
        out["creationDate"] = receipt.creationDate.map(RFC3339.format)
        out["expirationDate"] = receipt.expirationDate.map(RFC3339.format)
        out["opaque"] = receipt.opaque?.hexString
        out["sha1Hash"] = receipt.sha1Hash?.hexString
        out["inApp"] = receipt.inApp.map { p -> [String: Any] in
            var r: [String: Any] = [:]
            r["productId"] = p.productId
            r["transactionId"] = p.transactionId
            r["originalTransactionId"] = p.originalTransactionId
            r["purchaseDate"] = p.purchaseDate.map(RFC3339.format)
            r["originalPurchaseDate"] = p.originalPurchaseDate.map(RFC3339.format)
            r["expiresDate"] = p.expiresDate.map(RFC3339.format)
            r["cancellationDate"] = p.cancellationDate.map(RFC3339.format)
            r["quantity"] = p.quantity
            r["webOrderLineItemId"] = p.webOrderLineItemId
            r["isInIntroOfferPeriod"] = p.isInIntroOfferPeriod
            return r
        }
        return out
    }

    static func decodeJSON(_ bytes: [UInt8]) -> Any? { try? JSONSerialization.jsonObject(with: Data(bytes)) }

    /// Replaces nested JWS strings (`signedTransactionInfo`, `signedRenewalInfo`, …) by their decoded payloads.
    static func expandNested(_ value: Any) -> Any {
        if var dict = value as? [String: Any] {
            for (key, inner) in dict {
                if key.hasPrefix("signed"), let text = inner as? String, text.hasPrefix("eyJ") {
                    let parts = text.split(separator: ".", omittingEmptySubsequences: false)
                    if parts.count == 3, let payload = Base64.decodeURL(parts[1]), let decoded = decodeJSON(payload) {
                        dict[key] = decoded
                        continue
                    }
                }
                dict[key] = expandNested(inner)
            }
            return dict
        }
        if let array = value as? [Any] { return array.map(expandNested) }
        return value
    }
}
