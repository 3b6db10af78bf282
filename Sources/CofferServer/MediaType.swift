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

    /// The lower-cased text after the last `.` (none for `.hidden` or a name without one).
    static func fileExtension(_ fileName: String) -> String {
        guard let dot = fileName.lastIndex(of: "."), dot != fileName.startIndex else { return "" }
        return fileName[fileName.index(after: dot)...].lowercased()
    }
}
