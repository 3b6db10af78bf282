import CofferCore
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// Auditors (and admins): query and export the ledger.
struct AuditController {
    let ledger: any LedgerRepository
    /// Delivery evidence (nil: the server records none).
    let deliveries: (any DeliveryRepository)?
    /// Streams the chained export (`kind=ledger`).
    let ledgerExport: LedgerController

    func add(to group: RouterGroup<CofferRequestContext>) {
        group.get("/redemptions") { request, _ in
            try Self.refuseFilters(request, besides: Self.redemptionFilters, of: "redemptions")
            let filter = try Self.filter(request)
            let items = try await ledger.redemptions(filter)
            return try JSON.response(Page(items: items, nextCursor: items.count == filter.limit ? items.last.map { String($0.sequence) } : nil))
        }
        group.get("/attempts") { request, _ in
            try Self.refuseFilters(request, besides: Self.attemptFilters, of: "attempts")
            let filter = try Self.filter(request)
            let items = try await ledger.attempts(filter)
            return try JSON.response(Page(items: items, nextCursor: items.count == filter.limit ? items.last.map { String($0.sequence) } : nil))
        }
        group.get("/export") { request, _ in try await export(request) }
        group.get("/stats/hourly") { request, _ in try await hourly(request) }
        group.get("/revocations") { request, _ in
            try Self.refuseFilters(request, besides: [], of: "revocations")
            let (after, limit) = try Paging.parse(request)
            let items = try await ledger.revocations(after: after, limit: limit)
            return try JSON.response(Page(items: items, nextCursor: items.count == limit ? items.last.map { String($0.sequence) } : nil))
        }
        group.get("/events") { request, _ in
            try Self.refuseFilters(request, besides: [], of: "purchase events")
            let (after, limit) = try Paging.parse(request)
            let items = try await ledger.purchaseEvents(after: after, limit: limit)
            return try JSON.response(Page(items: items, nextCursor: items.count == limit ? items.last.map { String($0.sequence) } : nil))
        }
        group.get("/deliveries") { request, _ in
            try Self.refuseFilters(request, besides: Self.deliveryFilters, of: "deliveries")
            let (after, limit) = try Paging.parse(request)
            let redemptionId = try Self.identifier(request, "redemptionId")
            let items = try await deliveries?.deliveries(redemptionId: redemptionId, after: after, limit: limit) ?? []
            return try JSON.response(Page(items: items, nextCursor: items.count == limit ? items.last.map { String($0.sequence) } : nil))
        }
    }

    /// The longest span `/stats/hourly` answers: 31 days of hours.
    static let maxStatsSpan: TimeInterval = 31 * 86400

    struct HourlyStats: Encodable {
        var from: Date
        var to: Date
        var hours: [HourlyCount]
    }

    /// `GET /v1/audit/stats/hourly[?from&to]`: redemptions and refused attempts per UTC hour
    /// (default: the last 24 hours; at most 31 days), counted by the database.
    func hourly(_ request: Request) async throws -> Response {
        let to = try Self.date(request, "to") ?? Date()
        let from = try Self.date(request, "from") ?? to.addingTimeInterval(-86400)
        guard from < to, to.timeIntervalSince(from) <= Self.maxStatsSpan else {
            throw Problem(.malformedRequest, "from must be before to, at most 31 days apart")
        }
        return try JSON.response(HourlyStats(from: from, to: to, hours: try await ledger.hourlyCounts(from: from, to: to)))
    }

    /// An optional ISO 8601 query parameter; 400 when present but not a date.
    static func date(_ request: Request, _ key: String) throws -> Date? {
        guard let text = request.uri.queryParameters.get(key) else { return nil }
        guard let date = RFC3339.parse(text) else { throw Problem(.malformedRequest, "\(key) must be an ISO 8601 date") }
        return date
    }

    /// An optional identifier to filter on; 400 when no stored value can be it: every
    /// identifier the ledger stores, claimed ones included, is 1–128 bytes without control
    /// characters (``LedgerText``). A `%00` would otherwise reach the database, where
    /// PostgreSQL refuses the NUL (a 503) and SQLite's binding cuts the value at it.
    static func identifier(_ request: Request, _ key: String) throws -> String? {
        guard let value = request.uri.queryParameters.get(key) else { return nil }
        guard LedgerText.isIdentifier(value) else {
            throw Problem(.malformedRequest, "\(key) must be 1–\(LedgerText.maxIdentifierBytes) bytes without control characters")
        }
        return value
    }

    /// The filters each listing applies. Any other is refused (400), never ignored: an
    /// auditor answering one player's request with `kind=attempts&playerId=…` got every
    /// client's rows, believing them filtered.
    static let redemptionFilters: Set<String> = ["transactionId", "originalTransactionId", "productId", "bundleId", "playerId", "from", "to"]
    static let attemptFilters: Set<String> = ["transactionId", "productId", "code", "from", "to"]
    static let deliveryFilters: Set<String> = ["redemptionId"]
    static let allFilters = redemptionFilters.union(attemptFilters).union(deliveryFilters)

    /// 400 for a filter `kind` does not apply, and for any query parameter the route does not
    /// know (`playerID=`, a typo, was ignored the same way): besides the filters it applies,
    /// a route takes `limit` and `cursor` (not the ledger export: it is whole), and the export
    /// `format` and `kind`.
    static func refuseFilters(_ request: Request, besides applied: Set<String>, of kind: String, export: Bool = false, paged: Bool = true) throws {
        let known = applied.union(paged ? ["limit", "cursor"] : []).union(export ? ["format", "kind"] : [])
        for (name, _) in request.uri.queryParameters where !known.contains(String(name)) {
            let name = String(name)
            guard allFilters.contains(name) else {
                throw Problem(.malformedRequest, "unknown query parameter \(LedgerText.escaped(name, maxBytes: 64))")
            }
            let takes = applied.isEmpty ? "no filters" : "only " + applied.sorted().joined(separator: ", ")
            throw Problem(.malformedRequest, "\(name) does not filter \(kind): it takes \(takes)")
        }
    }

    static func filter(_ request: Request) throws -> AuditFilter {
        let q = request.uri.queryParameters
        var f = AuditFilter()
        f.transactionId = try identifier(request, "transactionId")
        f.originalTransactionId = try identifier(request, "originalTransactionId")
        f.productId = try identifier(request, "productId")
        f.bundleId = try identifier(request, "bundleId")
        f.playerId = try identifier(request, "playerId")
        f.code = try identifier(request, "code")
        f.from = try date(request, "from")
        f.to = try date(request, "to")
        if let limit = q.get("limit") {
            guard let n = Int(limit), (1...1000).contains(n) else { throw Problem(.malformedRequest, "limit must be 1–1000") }
            f.limit = n
        }
        if let cursor = q.get("cursor") { f.after = try Paging.cursor(cursor) }
        return f
    }

    /// Streams every redemption (or attempt, `kind=attempts`) as NDJSON or CSV, page by page.
    func export(_ request: Request) async throws -> Response {
        let format = request.uri.queryParameters.get("format") ?? "ndjson"
        let kind = request.uri.queryParameters.get("kind") ?? "redemptions"
        guard format == "ndjson" || format == "csv" else { throw Problem(.malformedRequest, "format must be ndjson or csv") }
        guard ["redemptions", "attempts", "deliveries", "ledger"].contains(kind) else {
            throw Problem(.malformedRequest, "kind must be redemptions, attempts, deliveries or ledger")
        }
        try Self.refuseFilters(
            request,
            besides: [
                "redemptions": Self.redemptionFilters, "attempts": Self.attemptFilters, "deliveries": Self.deliveryFilters,
            ][kind] ?? [], of: kind == "ledger" ? "the ledger export (it is whole)" : kind, export: true, paged: kind != "ledger")
        if kind == "ledger" {
            guard format == "ndjson" else { throw Problem(.malformedRequest, "the ledger export is ndjson") }
            return try await ledgerExport.export()
        }
        var firstPage = try Self.filter(request)
        firstPage.limit = 500
        let ledger = self.ledger
        let deliveries = self.deliveries
        let redemptionId = try Self.identifier(request, "redemptionId")
        // One page as text: the rows' lines, the last sequence, how many.
        let page: @Sendable (AuditFilter) async throws -> (text: String, last: Int64?, count: Int) = { filter in
            var out = ""
            switch kind {
            case "deliveries":
                let rows = try await deliveries?.deliveries(redemptionId: redemptionId, after: filter.after, limit: filter.limit) ?? []
                for d in rows { out += format == "csv" ? CSV.line(d) : try CSV.json(d) }
                return (out, rows.last?.sequence, rows.count)
            case "redemptions":
                let rows = try await ledger.redemptions(filter)
                for r in rows { out += format == "csv" ? CSV.line(r) : try CSV.json(r) }
                return (out, rows.last?.sequence, rows.count)
            default:
                let rows = try await ledger.attempts(filter)
                for a in rows { out += format == "csv" ? CSV.line(a) : try CSV.json(a) }
                return (out, rows.last?.sequence, rows.count)
            }
        }
        // The first page is read before the 200 goes out: a database that does not answer is
        // a 503, not a 200 with an empty body. Later pages stream; a failure then cuts the
        // connection short.
        let start = firstPage
        let first = try await page(start)
        let body = ResponseBody { writer in
            if format == "csv" {
                let header =
                    switch kind {
                    case "redemptions":
                        "sequence,redemptionId,transactionId,originalTransactionId,productId,bundleId,environment,purchaseDate,quantity,receiptSHA256,sourceFormat,redeemedAt,clientAddress,appAccountToken,status,playerId,expiresAt\n"
                    case "deliveries": "sequence,redemptionId,assetId,sha256,firstAt,lastAt,downloads,completed,bytesServed,complete\n"
                    default: "sequence,at,code,detail,transactionId,productId,receiptSHA256,clientAddress\n"
                    }
                try await writer.write(ByteBuffer(string: header))
            }
            var filter = start
            var current = first
            while true {
                if !current.text.isEmpty { try await writer.write(ByteBuffer(string: current.text)) }
                guard let last = current.last, current.count == filter.limit else { break }
                filter.after = last
                current = try await page(filter)
            }
            try await writer.finish(nil)
        }
        return Response(
            status: .ok, headers: [.contentType: format == "csv" ? "text/csv; charset=utf-8" : "application/x-ndjson"], body: body)
    }
}
