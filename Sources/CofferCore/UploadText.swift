import Foundation

/// The shape of what an admin may name an upload: its media type and its file name. Checked
/// by the server on every upload and by `coffer admin sync` on its manifest before anything
/// is sent (a release refused halfway would be published in part).
public enum UploadText {
    /// Longest `Content-Type` an upload may declare, in bytes.
    public static let maxMediaTypeLength = 128
    /// Longest asset name, in UTF-8 bytes.
    public static let maxAssetNameBytes = 200

    /// Whether `value` is a media type as RFC 9110 §8.3.1 writes one — `type/subtype` and
    /// `; name=value` parameters (a token or a quoted string; empty ones allowed), in ASCII,
    /// at most ``maxMediaTypeLength`` bytes. An upload's type reaches every download's
    /// `Content-Type`, the client's listings and terminals: nothing else is stored (it was cut
    /// at 128 characters, C1 controls and all).
    public static func isMediaType(_ value: String) -> Bool {
        let bytes = Array(value.utf8)
        guard (1...maxMediaTypeLength).contains(bytes.count) else { return false }
        var i = 0
        func token() -> Bool {
            let start = i
            while i < bytes.count, isTokenByte(bytes[i]) { i += 1 }
            return i > start
        }
        func skipSpace() { while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x09 { i += 1 } }
        guard token(), i < bytes.count, bytes[i] == UInt8(ascii: "/") else { return false }
        i += 1
        guard token() else { return false }
        while true {
            skipSpace()
            guard i < bytes.count else { return true }
            guard bytes[i] == UInt8(ascii: ";") else { return false }
            i += 1
            skipSpace()
            // `*( OWS ";" OWS [ parameter ] )`: a parameter may be left out.
            guard i < bytes.count, bytes[i] != UInt8(ascii: ";") else { continue }
            guard token(), i < bytes.count, bytes[i] == UInt8(ascii: "=") else { return false }
            i += 1
            if i < bytes.count, bytes[i] == UInt8(ascii: "\"") {
                guard quotedString() else { return false }
            } else if !token() {
                return false
            }
        }
        /// A quoted string from its opening quote at `i`: qdtext and quoted pairs in ASCII.
        func quotedString() -> Bool {
            i += 1
            while i < bytes.count {
                let c = bytes[i]
                if c == UInt8(ascii: "\"") {
                    i += 1
                    return true
                }
                if c == UInt8(ascii: "\\") {
                    i += 1
                    guard i < bytes.count, bytes[i] == 0x09 || (0x20...0x7E).contains(bytes[i]) else { return false }
                } else if !(c == 0x09 || (0x20...0x7E).contains(c)) {
                    return false
                }
                i += 1
            }
            return false
        }
    }

    /// RFC 9110 `tchar`.
    static func isTokenByte(_ c: UInt8) -> Bool {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"): true
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"), UInt8(ascii: "'"), UInt8(ascii: "*"),
            UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "^"), UInt8(ascii: "_"), UInt8(ascii: "`"), UInt8(ascii: "|"),
            UInt8(ascii: "~"):
            true
        default: false
        }
    }

    /// Why `name` cannot name an asset, or nil: 1–``maxAssetNameBytes`` bytes of UTF-8 without
    /// a control character (C0 including NUL, DEL, C1), a slash or backslash, or an invisible or
    /// bidirectional formatting character (``LedgerText/isUnsafe(_:)``: a right-to-left override
    /// shows "level\u{202E}nib.exe" as "levelexe.bin" where a game saves it). Names reach
    /// clients (`assets[].name`), file names and admin logs.
    public static func assetNameProblem(_ name: String) -> String? {
        guard (1...maxAssetNameBytes).contains(name.utf8.count) else { return "name must be 1–\(maxAssetNameBytes) bytes of UTF-8" }
        func code(_ scalar: Unicode.Scalar) -> String { "U+" + String(scalar.value, radix: 16, uppercase: true) }
        for scalar in name.unicodeScalars {
            switch scalar.value {
            case 0x00...0x1F, 0x7F...0x9F: return "name contains a control character (\(code(scalar)))"
            case 0x2F, 0x5C: return "name contains a slash or backslash"
            case _ where LedgerText.isUnsafe(scalar): return "name contains an invisible or bidirectional formatting character (\(code(scalar)))"
            default: continue
            }
        }
        return nil
    }
}
