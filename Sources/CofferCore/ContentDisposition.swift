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
        return "attachment; filename=\"\(fallback.prefix(200))\"; filename*=UTF-8''\(PercentEncoding.encode(String(name.prefix(200))))"
    }
}
