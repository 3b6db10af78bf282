import Crypto

/// Hexadecimal, the one encoder and decoder every module uses: digests and ledger hashes are
/// stored and compared as lower-case hex, and percent-encodings carry hex digits of either case.
public enum Hex {
    private static let digits = Array("0123456789abcdef".utf8)

    /// Lower-case hex of `bytes`, two characters a byte.
    public static func encode<B: Sequence>(_ bytes: B) -> String where B.Element == UInt8 {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.underestimatedCount * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes of `text`, strictly: an even number of lower-case hex digits (the form
    /// ``encode(_:)`` writes), nil for anything else.
    public static func decode<S: StringProtocol>(_ text: S) -> [UInt8]? {
        let characters = Array(text.utf8)
        guard characters.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(characters.count / 2)
        var i = 0
        while i < characters.count {
            guard let high = lowerCaseNibble(characters[i]), let low = lowerCaseNibble(characters[i + 1]) else { return nil }
            out.append(high << 4 | low)
            i += 2
        }
        return out
    }

    /// Whether `text` is exactly what ``encode(_:)`` writes for `byteCount` bytes: `2 × byteCount`
    /// lower-case hex digits. Checks in place, with no copy (content addresses are checked on
    /// every download).
    public static func isEncoded<S: StringProtocol>(_ text: S, byteCount: Int) -> Bool {
        text.utf8.count == 2 * byteCount && text.utf8.allSatisfy { lowerCaseNibble($0) != nil }
    }

    /// The value (0–15) of one hex digit of either case, nil for any other byte.
    public static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
        default: lowerCaseNibble(c)
        }
    }

    /// The value (0–15) of one lower-case hex digit, nil for any other byte.
    private static func lowerCaseNibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        default: nil
        }
    }
}

extension Sequence where Element == UInt8 {
    /// Lower-case hexadecimal (``Hex/encode(_:)``).
    public var hexString: String { Hex.encode(self) }
}

extension Digest {
    /// Lower-case hexadecimal of the digest's bytes (``Hex/encode(_:)``).
    public var hexString: String { withUnsafeBytes { Hex.encode($0) } }
}
