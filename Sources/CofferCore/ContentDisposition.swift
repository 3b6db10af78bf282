/// `Content-Disposition` for a download (RFC 6266): always an attachment, so a browser never
/// renders an asset inline on Coffer's origin (an uploaded SVG or HTML file cannot run script
/// beside the console), with the asset's file name.
public enum ContentDisposition {
    /// `attachment; filename="…"; filename*=UTF-8''…`: an ASCII fallback with quotes,
    /// backslashes and controls replaced, and the exact name percent-encoded (RFC 8187).
    public static func attachment(_ name: String) -> String {
        let fallback = String(
            name.unicodeScalars.map { scalar -> Character in
                scalar.isASCII && scalar.value >= 0x20 && scalar.value != 0x7F && scalar != "\"" && scalar != "\\" ? Character(scalar) : "_"
            })
        return "attachment; filename=\"\(fallback.prefix(200))\"; filename*=UTF-8''\(percentEncoded(String(name.prefix(200))))"
    }

    /// Every byte but RFC 3986's unreserved characters as `%XX`.
    static func percentEncoded(_ text: String) -> String {
        let hexDigits = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "~"):
                out.append(byte)
            default:
                out += [UInt8(ascii: "%"), hexDigits[Int(byte >> 4)], hexDigits[Int(byte & 0x0F)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
