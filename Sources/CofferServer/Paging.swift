import Hummingbird

/// `cursor` and `limit` query parameters.
enum Paging {
    static func parse(_ request: Request, defaultLimit: Int = 100) throws -> (after: Int64, limit: Int) {
        let q = request.uri.queryParameters
        var limit = defaultLimit
        if let text = q.get("limit") {
            guard let n = Int(text), (1...1000).contains(n) else { throw Problem(.malformedRequest, "limit must be 1–1000") }
            limit = n
        }
        var after: Int64 = 0
        if let text = q.get("cursor") { after = try cursor(text) }
        return (after, limit)
    }

    /// A cursor from a previous page: decimal digits only (no sign, no spaces), at most 19.
    static func cursor(_ text: String) throws -> Int64 {
        guard (1...19).contains(text.utf8.count), text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let n = Int64(text) else {
            throw Problem(.malformedRequest, "cursor must be a cursor from a previous page")
        }
        return n
    }
}
