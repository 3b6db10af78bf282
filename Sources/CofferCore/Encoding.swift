import Crypto
import Foundation

/// Base64 helpers that never trap on input.
public enum Base64 {
    /// Decodes standard base64, ignoring ASCII whitespace (receipts are often line-wrapped).
    /// Returns nil on any other non-alphabet character or bad padding.
    public static func decode(_ text: String) -> [UInt8]? {
        var cleaned = text
        if text.utf8.contains(where: { $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) {
            cleaned = String(decoding: text.utf8.filter { !($0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09) }, as: UTF8.self)
        }
        guard let data = Data(base64Encoded: cleaned) else { return nil }
        return [UInt8](data)
    }

    /// Decodes unpadded base64url (RFC 7515 §2). Returns nil on any invalid character.
    public static func decodeURL<S: StringProtocol>(_ text: S) -> [UInt8]? {
        var standard = String(text).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        if standard.contains("=") { return nil }
        switch standard.utf8.count % 4 {
        case 0: break
        case 2: standard += "=="
        case 3: standard += "="
        default: return nil
        }
        guard let data = Data(base64Encoded: standard) else { return nil }
        return [UInt8](data)
    }

    /// Encodes bytes as unpadded base64url.
    public static func encodeURL<B: Sequence>(_ bytes: B) -> String where B.Element == UInt8 {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}

extension Sequence where Element == UInt8 {
    /// Lower-case hexadecimal.
    public var hexString: String {
        var out = ""
        out.reserveCapacity(64)
        let digits: [Character] = Array("0123456789abcdef")
        for byte in self {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return out
    }
}

extension Digest {
    public var hexString: String { self.withUnsafeBytes { Array($0).hexString } }
}
