/// Media types by file-name extension: for uploads sent without a `Content-Type` and for the
/// console's own files. Unknown extensions are `application/octet-stream`.
public enum MediaType {
    public static let byExtension: [String: String] = [
        "html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8", "css": "text/css; charset=utf-8",
        "json": "application/json", "txt": "text/plain; charset=utf-8", "csv": "text/csv; charset=utf-8", "xml": "application/xml",
        "svg": "image/svg+xml", "png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp",
        "ico": "image/x-icon", "ogg": "audio/ogg", "mp3": "audio/mpeg", "wav": "audio/wav", "mp4": "video/mp4", "zip": "application/zip",
        "gz": "application/gzip", "pdf": "application/pdf", "wasm": "application/wasm",
    ]

    /// Types that a browser would run (HTML, script, SVG, XML): never guessed for an upload —
    /// an admin who means one sends it as `Content-Type`.
    static let active: Set<String> = ["html", "htm", "js", "mjs", "svg", "xml", "xhtml"]

    /// The type an upload without `Content-Type` gets from its name: never an active one.
    public static func forUpload(fileName: String) -> String {
        active.contains(fileExtension(fileName)) ? "application/octet-stream" : of(fileName: fileName)
    }

    public static func of(fileName: String) -> String { byExtension[fileExtension(fileName)] ?? "application/octet-stream" }

    /// Longest `Content-Type` an upload may declare, in bytes.
    public static let maxLength = 128

    /// Whether `value` is a media type as RFC 9110 §8.3.1 writes one — `type/subtype` and
    /// `; name=value` parameters (a token or a quoted string), in ASCII, at most
    /// ``maxLength`` bytes. An upload's type reaches every download's `Content-Type`, the
    /// client's listings and terminals: nothing else is stored (it was cut at 128 characters,
    /// C1 controls and all).
    public static func isValid(_ value: String) -> Bool {
        let bytes = Array(value.utf8)
        guard (1...maxLength).contains(bytes.count) else { return false }
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
            guard token(), i < bytes.count, bytes[i] == UInt8(ascii: "=") else { return false }
            i += 1
            if i < bytes.count, bytes[i] == UInt8(ascii: "\"") {
                i += 1
                var closed = false
                while i < bytes.count {
                    let c = bytes[i]
                    if c == UInt8(ascii: "\"") {
                        closed = true
                        i += 1
                        break
                    }
                    if c == UInt8(ascii: "\\") {
                        i += 1
                        guard i < bytes.count, bytes[i] == 0x09 || (0x20...0x7E).contains(bytes[i]) else { return false }
                    } else if !(c == 0x09 || (0x20...0x7E).contains(c)) {
                        return false
                    }
                    i += 1
                }
                guard closed else { return false }
            } else if !token() {
                return false
            }
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

    /// The lower-cased text after the last `.` (none for `.hidden` or a name without one).
    static func fileExtension(_ fileName: String) -> String {
        guard let dot = fileName.lastIndex(of: "."), dot != fileName.startIndex else { return "" }
        return fileName[fileName.index(after: dot)...].lowercased()
    }
}
