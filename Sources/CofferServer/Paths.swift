import CofferCore
import Foundation
import Hummingbird

/// Which request paths Coffer serves, and how a path is written where others can read it
/// (the request log, a problem's `instance`).
///
/// The router splits paths on `/` and skips empty segments, so `//v1/downloads/T`,
/// `/v1//downloads/T` and `/metrics/` would reach the same handlers as their canonical
/// spellings — past exact-match rules in a proxy in front (`location = /metrics`) and past
/// prefix-based log redaction. Coffer's own paths never need more than the characters of
/// identifiers and tokens, so only the canonical spelling is served.
enum PathPolicy {
    /// A path is canonical when it is `/` or `/`-separated non-empty segments with no trailing
    /// `/`, no `.` or `..` segment, no percent-encoding (Coffer's ids and tokens are unreserved
    /// characters; an encoded byte is a second spelling of the same path, `%2F` a hidden
    /// separator) and only RFC 3986 `pchar` characters.
    static func isCanonical(_ path: String) -> Bool {
        let bytes = path.utf8
        guard bytes.first == UInt8(ascii: "/") else { return false }
        if bytes.count == 1 { return true }
        guard bytes.last != UInt8(ascii: "/") else { return false }
        for segment in bytes.dropFirst().split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false) {
            guard !segment.isEmpty else { return false }
            if segment.allSatisfy({ $0 == UInt8(ascii: ".") }), segment.count <= 2 { return false }
            guard segment.allSatisfy(isPathCharacter) else { return false }
        }
        return true
    }

    /// Unreserved, sub-delims, `:` and `@` (RFC 3986 `pchar` without percent-encodings).
    static func isPathCharacter(_ c: UInt8) -> Bool {
        switch c {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
        case UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"): true
        case UInt8(ascii: "!"), UInt8(ascii: "$"), UInt8(ascii: "&"), UInt8(ascii: "'"), UInt8(ascii: "("), UInt8(ascii: ")"),
            UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: ","), UInt8(ascii: ";"), UInt8(ascii: "="), UInt8(ascii: ":"), UInt8(ascii: "@"):
            true
        default: false
        }
    }

    static let redactedSegment = "<redacted>"

    /// `path` with every secret-bearing segment replaced by `<redacted>`, whatever the spelling:
    /// every segment after a `downloads` segment (compared percent-decoded and case-blind,
    /// empty and dot segments included), every segment that looks like a token
    /// (``looksLikeToken(_:)``, raw or percent-decoded), and every segment hiding an encoded
    /// separator. Used for the request log and problem `instance`s.
    static func redacted(_ path: String) -> String {
        var afterDownloads = false
        var out: [Substring] = []
        for segment in path.split(separator: "/", omittingEmptySubsequences: false) {
            if afterDownloads {
                out.append(segment.isEmpty ? segment : Substring(redactedSegment))
                continue
            }
            let decoded = percentDecoded(segment)
            let folded = decoded.lowercased()
            if folded == "downloads" {
                afterDownloads = true
                out.append(segment)
            } else if looksLikeToken(segment) || looksLikeToken(Substring(decoded)) || folded.contains("/") || folded.contains("\\")
                || folded.contains("downloads")
            {
                afterDownloads = afterDownloads || folded.contains("downloads")
                out.append(Substring(redactedSegment))
            } else {
                out.append(segment)
            }
        }
        return out.joined(separator: "/")
    }

    /// Base64url (and `.`/`=`) only, with a dot, and a dot-separated part of at least 32
    /// characters: a download token (`v1.<key>.<payload>.<43-character MAC>`) always is.
    static func looksLikeToken(_ segment: Substring) -> Bool {
        guard segment.utf8.count >= 32, segment.contains(".") else { return false }
        let base64url = segment.utf8.allSatisfy { c in
            (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == 0x2D || c == 0x5F || c == 0x2E || c == 0x3D
        }
        return base64url && segment.split(separator: ".").contains { $0.utf8.count >= 32 }
    }

    /// Percent-decoding of a segment, lossy (for comparison only); malformed escapes stay as they are.
    static func percentDecoded(_ segment: Substring) -> String {
        guard segment.contains("%") else { return String(segment) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(segment.utf8.count)
        let utf8 = Array(segment.utf8)
        var i = 0
        while i < utf8.count {
            if utf8[i] == UInt8(ascii: "%"), i + 2 < utf8.count, let high = Hex.nibble(utf8[i + 1]), let low = Hex.nibble(utf8[i + 2]) {
                bytes.append(high << 4 | low)
                i += 3
            } else {
                bytes.append(utf8[i])
                i += 1
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// Serves only canonical paths (``PathPolicy/isCanonical(_:)``): anything else is 400
/// `nonCanonicalPath` (a malformed request target, as Coffer sees it), before any route or
/// authentication sees it, with no trace of the path in the answer.
struct CanonicalPathMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard PathPolicy.isCanonical(request.uri.path) else {
            throw Problem(.nonCanonicalPath, "the path is not in canonical form (empty, '.' or '..' segments, a trailing slash or percent-encoding)")
        }
        return try await next(request, context)
    }
}
