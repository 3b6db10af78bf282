/// RFC 3986 percent-encoding of UTF-8 bytes: the unreserved characters (`A–Z a–z 0–9 - _ . ~`)
/// kept, every other byte `%XX` (upper-case hex), `/` kept in a path. One encoder for SigV4's
/// canonical requests and the RFC 8187 file names of `Content-Disposition`.
public enum PercentEncoding {
    private static let hexDigits: [UInt8] = Array("0123456789ABCDEF".utf8)

    @inline(__always)
    private static func kept(_ byte: UInt8, keepSlash: Bool) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "~"):
            return true
        case UInt8(ascii: "/"): return keepSlash
        default: return false
        }
    }

    /// Every presigned URL encodes a dozen names and values, most of them with nothing to
    /// escape: those come back as they are, without a copy.
    public static func encode(_ text: String, keepSlash: Bool = false) -> String {
        guard text.utf8.contains(where: { !kept($0, keepSlash: keepSlash) }) else { return text }
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count + 16)
        for byte in text.utf8 {
            if kept(byte, keepSlash: keepSlash) {
                out.append(byte)
            } else {
                out.append(UInt8(ascii: "%"))
                out.append(hexDigits[Int(byte >> 4)])
                out.append(hexDigits[Int(byte & 0x0F)])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
