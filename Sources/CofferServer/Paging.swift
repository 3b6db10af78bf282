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
        if let text = q.get("cursor") {
            guard let n = Int64(text), n >= 0 else { throw Problem(.malformedRequest, "cursor must be a cursor from a previous page") }
            after = n
        }
        return (after, limit)
    }
}
