import CofferCore
import Foundation
import Hummingbird

/// CSV lines and NDJSON objects for the audit exports.
enum CSV {
    /// A quoted CSV cell, neutralised against formula injection (OWASP "CSV Injection"): a
    /// cell that starts with a tab, CR or LF, or whose first character after any leading
    /// whitespace or control characters is `=`, `+`, `-` or `@` (or their full-width forms),
    /// gets a leading `'` so spreadsheets show it as text.
    static func field(_ value: String?) -> String {
        guard let value else { return "" }
        var v = value
        if isFormulaLike(v) { v = "'" + v }
        return "\"" + v.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    static func isFormulaLike(_ value: String) -> Bool {
        guard let first = value.unicodeScalars.first else { return false }
        if first == "\t" || first == "\r" || first == "\n" { return true }
        let significant = value.unicodeScalars.first { !($0.properties.isWhitespace || $0.value < 0x20 || (0x7F...0x9F).contains($0.value)) }
        guard let significant else { return false }
        return "=+-@\u{FF1D}\u{FF0B}\u{FF0D}\u{FF20}".unicodeScalars.contains(significant)
    }

    static func line(_ r: Redemption) -> String {
        [
            String(r.sequence), field(r.redemptionId), field(r.transactionId), field(r.originalTransactionId), field(r.productId), field(r.bundleId),
            field(r.environment), field(r.purchaseDate.map(RFC3339.format)), String(r.quantity), field(r.receiptSHA256),
            field(r.sourceFormat.rawValue),
            field(RFC3339.format(r.redeemedAt)), field(r.clientAddress), field(r.appAccountToken), field(r.status), field(r.playerId),
            field(r.expiresAt.map(RFC3339.format)),
        ].joined(separator: ",") + "\n"
    }

    static func line(_ a: RejectedAttempt) -> String {
        [
            String(a.sequence), field(RFC3339.format(a.at)), field(a.code), field(a.detail), field(a.transactionId), field(a.productId),
            field(a.receiptSHA256), field(a.clientAddress),
        ].joined(separator: ",") + "\n"
    }

    static func line(_ d: Delivery) -> String {
        [
            String(d.sequence), field(d.redemptionId), field(d.assetId), field(d.sha256), field(RFC3339.format(d.firstAt)),
            field(RFC3339.format(d.lastAt)), String(d.downloads), String(d.completed), String(d.bytesServed), d.complete ? "true" : "false",
        ].joined(separator: ",") + "\n"
    }

    static func json<T: Encodable>(_ value: T) throws -> String {
        String(decoding: try JSON.encoder.encode(value), as: UTF8.self) + "\n"
    }
}
