/// RFC 3986 percent-encoding of UTF-8 bytes: the unreserved characters (`A–Z a–z 0–9 - _ . ~`)
/// kept, every other byte `%XX` (upper-case hex), `/` kept in a path. One encoder for SigV4's
/// canonical requests and the RFC 8187 file names of `Content-Disposition`.
public enum PercentEncoding {
    public static func encode(_ text: String, keepSlash: Bool = false) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count)
        let hexDigits = Array("0123456789ABCDEF".utf8)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "~"):
                out.append(byte)
            case UInt8(ascii: "/") where keepSlash:
                out.append(byte)
            default:
                out += [UInt8(ascii: "%"), hexDigits[Int(byte >> 4)], hexDigits[Int(byte & 0x0F)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
