import Foundation

/// Text from a server or a manifest, made safe to print on a terminal: control characters
/// (C0, DEL, C1 — escape sequences that clear the screen or retitle the window) and invisible
/// format characters (bidirectional overrides, zero-width spaces: "1000‮0002" shown as another
/// id) and line and paragraph separators (a new line in some terminals and viewers) become `?`.
public enum Terminal {
    public static func safe(_ text: String) -> String {
        String(
            String.UnicodeScalarView(
                text.unicodeScalars.map { scalar in
                    switch scalar.properties.generalCategory {
                    case .control, .format, .lineSeparator, .paragraphSeparator: "?"
                    default: scalar
                    }
                }))
    }

    /// JSON (a server's answer, or one encoded from it) made safe to print the same way, and
    /// still the same JSON: control and format characters become `\\uXXXX` escapes —
    /// JSONEncoder and servers leave C1 controls and bidirectional overrides as they are,
    /// and a terminal acts on them. Newlines, tabs and carriage returns are left: outside a
    /// string they are the layout, and inside one a valid JSON text holds them escaped — but a
    /// carriage return, which returns the cursor to overwrite the line, becomes a space (JSON
    /// whitespace outside strings; raw, it is invalid inside one anyway). Line and paragraph
    /// separators are escaped too.
    public static func safeJSON(_ json: String) -> String {
        var out = String.UnicodeScalarView()
        for scalar in json.unicodeScalars {
            switch scalar.properties.generalCategory {
            case _ where scalar == "\r": out.append(" ")
            case .control where scalar != "\n" && scalar != "\t", .format, .lineSeparator, .paragraphSeparator:
                for unit in String(scalar).utf16 {
                    let hex = String(unit, radix: 16)
                    out.append(contentsOf: ("\\u" + String(repeating: "0", count: 4 - hex.count) + hex).unicodeScalars)
                }
            default: out.append(scalar)
            }
        }
        return String(out)
    }
}

/// The identifiers the server takes in a path (asset, product and bundle ids): 1–128 of
/// `A–Z a–z 0–9 . _ -`, not `.` or `..`. Checked before a request is built, so an id can
/// never change the path or add a query.
public enum Identifier {
    public static func isValid(_ id: String) -> Bool {
        (1...128).contains(id.utf8.count) && id != "." && id != ".."
            && id.utf8.allSatisfy { c in
                (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == 0x2E || c == 0x5F || c == 0x2D
            }
    }

    /// `id` as a path segment, or a usage error naming `what`.
    public static func segment(_ id: String, _ what: String) throws -> String {
        guard isValid(id) else {
            throw ClientError.usage("\(what) \(Terminal.safe(id)): ids are 1–128 characters of A–Z a–z 0–9 . _ - (not . or ..)")
        }
        return id
    }
}
