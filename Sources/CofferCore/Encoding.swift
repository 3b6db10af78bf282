import Foundation

/// Base64 helpers that never trap on input.
public enum Base64 {
    /// 0–63 for alphabet characters (both `+/` and `-_`), 0xFE for ASCII whitespace, 0xFF otherwise.
    private static let table: [UInt8] = {
        var t = [UInt8](repeating: 0xFF, count: 256)
        for (i, c) in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789".utf8.enumerated() { t[Int(c)] = UInt8(i) }
        t[Int(UInt8(ascii: "+"))] = 62
        t[Int(UInt8(ascii: "/"))] = 63
        t[Int(UInt8(ascii: "-"))] = 62
        t[Int(UInt8(ascii: "_"))] = 63
        for c in [UInt8(ascii: " "), 0x0A, 0x0D, 0x09] { t[Int(c)] = 0xFE }
        return t
    }()

    /// Decodes standard base64, ignoring ASCII whitespace (receipts are often line-wrapped).
    /// Returns nil on any other non-alphabet character or bad padding.
    public static func decode(_ text: String) -> [UInt8]? { decode(bytes: Array(text.utf8)[...], url: false) }

    /// Decodes unpadded base64url (RFC 7515 §2). Returns nil on any invalid character.
    public static func decodeURL<S: StringProtocol>(_ text: S) -> [UInt8]? { decode(bytes: Array(text.utf8)[...], url: true) }

    /// Decodes base64 (`url: false`: `+/`, optional `=` padding, whitespace ignored) or
    /// base64url (`url: true`: `-_`, no padding, no whitespace).
    static func decode(bytes: ArraySlice<UInt8>, url: Bool) -> [UInt8]? {
        if url {
            return bytes.withUnsafeBufferPointer { input in
                var valid = true
                let decoded = [UInt8](unsafeUninitializedCapacity: decodedCapacity(input.count)) { out, count in
                    let written = decodeURL(input, into: out)
                    valid = written != nil
                    count = written ?? 0
                }
                return valid ? decoded : nil
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        var padding = 0
        let table = Self.table  // one lazy-global access, not one per character
        for c in bytes {
            let v = table.withUnsafeBufferPointer { $0[Int(c)] }  // 256 entries: any UInt8 is in range
            if v == 0xFE {
                guard !url else { return nil }
                continue
            }
            if c == UInt8(ascii: "=") {
                guard !url else { return nil }
                padding += 1
                continue
            }
            guard v != 0xFF, padding == 0 else { return nil }
            // The two alphabets must not mix.
            if url ? (c == UInt8(ascii: "+") || c == UInt8(ascii: "/")) : (c == UInt8(ascii: "-") || c == UInt8(ascii: "_")) { return nil }
            accumulator = (accumulator << 6) | UInt32(v)
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
            }
        }
        // Leftover bits must be zero padding: 0 (complete), 2 or 4 bits (1 or 2 missing chars).
        guard bits == 0 || bits == 2 || bits == 4, accumulator & ((1 << UInt32(bits)) - 1) == 0 else { return nil }
        if !url {
            let expected = bits == 0 ? 0 : (bits == 4 ? 2 : 1)
            guard padding == 0 || padding == expected else { return nil }
        }
        return out
    }

    /// Room `decodeURL(_:into:)` needs for `count` input characters.
    static func decodedCapacity(_ count: Int) -> Int { count / 4 * 3 + 2 }

    /// base64url alphabet only: 0–63, 0xFF for everything else (padding and whitespace included).
    private static let urlTable: [UInt8] = {
        var t = [UInt8](repeating: 0xFF, count: 256)
        for (i, c) in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8.enumerated() { t[Int(c)] = UInt8(i) }
        return t
    }()

    /// Strict unpadded base64url into `out` (at least `decodedCapacity(input.count)` bytes), no
    /// allocation: the token and JWS hot paths. Returns the number of bytes written, or nil on a
    /// character outside the alphabet, an impossible length, or non-zero trailing bits.
    static func decodeURL(_ input: UnsafeBufferPointer<UInt8>, into out: UnsafeMutableBufferPointer<UInt8>) -> Int? {
        let remainder = input.count % 4
        guard remainder != 1, out.count >= decodedCapacity(input.count) else { return nil }
        return urlTable.withUnsafeBufferPointer { table -> Int? in
            var i = 0
            var o = 0
            var bad: UInt8 = 0
            let whole = input.count - remainder
            while i < whole {
                let a = table[Int(input[i])], b = table[Int(input[i + 1])], c = table[Int(input[i + 2])], d = table[Int(input[i + 3])]
                bad |= (a | b | c | d) & 0xC0
                let n = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                out[o] = UInt8(truncatingIfNeeded: n >> 16)
                out[o + 1] = UInt8(truncatingIfNeeded: n >> 8)
                out[o + 2] = UInt8(truncatingIfNeeded: n)
                i += 4
                o += 3
            }
            guard bad == 0 else { return nil }
            if remainder > 0 {
                let a = table[Int(input[i])], b = table[Int(input[i + 1])]
                let c = remainder == 3 ? table[Int(input[i + 2])] : 0
                guard (a | b | c) & 0xC0 == 0 else { return nil }
                let n = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6
                // The bits past the last whole byte must be zero (one canonical encoding).
                guard n & (remainder == 2 ? 0xFFFF : 0xFF) == 0 else { return nil }
                out[o] = UInt8(truncatingIfNeeded: n >> 16)
                o += 1
                if remainder == 3 {
                    out[o] = UInt8(truncatingIfNeeded: n >> 8)
                    o += 1
                }
            }
            return o
        }
    }

    /// Encodes bytes as unpadded base64url.
    public static func encodeURL<B: Sequence>(_ bytes: B) -> String where B.Element == UInt8 {
        let input = Array(bytes)
        var out: [UInt8] = []
        out.reserveCapacity((input.count * 4 + 2) / 3)
        var i = 0
        while i + 3 <= input.count {
            let n = UInt32(input[i]) << 16 | UInt32(input[i + 1]) << 8 | UInt32(input[i + 2])
            out.append(urlAlphabet[Int(n >> 18)])
            out.append(urlAlphabet[Int(n >> 12 & 63)])
            out.append(urlAlphabet[Int(n >> 6 & 63)])
            out.append(urlAlphabet[Int(n & 63)])
            i += 3
        }
        let rest = input.count - i
        if rest > 0 {
            let n = UInt32(input[i]) << 16 | (rest == 2 ? UInt32(input[i + 1]) << 8 : 0)
            out.append(urlAlphabet[Int(n >> 18)])
            out.append(urlAlphabet[Int(n >> 12 & 63)])
            if rest == 2 { out.append(urlAlphabet[Int(n >> 6 & 63)]) }
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static let urlAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
}
