import CofferCore
import Foundation
import GRDB
import Hummingbird
import HummingbirdTesting
import Testing

@testable import CofferServer

/// What operators rely on: client addresses behind a proxy, storage failures as 503,
/// spreadsheet-safe CSV.
@Suite struct OperationsTests {
    @Test func forwardedForIsBelievedOnlyFromTrustedProxies() {
        let trusted: Set<String> = ["10.0.0.2", "10.0.0.3"]
        // Untrusted peer: the header is ignored, whatever it says.
        #expect(ClientAddressMiddleware.client(peer: "198.51.100.7", forwardedFor: ["1.2.3.4"], trusted: trusted) == "198.51.100.7")
        // Trusted peer: the rightmost untrusted hop is the client; spoofed hops to its left are ignored.
        #expect(ClientAddressMiddleware.client(peer: "10.0.0.2", forwardedFor: ["6.6.6.6, 203.0.113.9"], trusted: trusted) == "203.0.113.9")
        #expect(
            ClientAddressMiddleware.client(peer: "10.0.0.2", forwardedFor: ["6.6.6.6", "203.0.113.9, 10.0.0.3"], trusted: trusted) == "203.0.113.9")
        #expect(ClientAddressMiddleware.client(peer: "10.0.0.2", forwardedFor: ["2001:db8::1"], trusted: trusted) == "2001:db8::1")
        // Garbage never becomes an address: the last good hop (here the proxy) stands.
        #expect(ClientAddressMiddleware.client(peer: "10.0.0.2", forwardedFor: ["<script>"], trusted: trusted) == "10.0.0.2")
        #expect(ClientAddressMiddleware.client(peer: "10.0.0.2", forwardedFor: [], trusted: trusted) == "10.0.0.2")
    }

    @Test func clientAddressBehindATrustedProxyReachesTheLedger() async throws {
        let h = try await Harness.make(trustedProxies: ["127.0.0.1"])
        defer { h.cleanUp() }
        try await h.app.test(.live) { client in
            var headers = Harness.jsonHeaders
            headers[.xForwardedFor] = "6.6.6.6, 203.0.113.9"
            let created = try await client.execute(
                uri: "/v1/redemptions", method: .post, headers: headers, body: try Harness.body(["receipt": try Harness.receipt("501")]))
            #expect(created.status == .created)
            let replay = try await client.execute(
                uri: "/v1/redemptions", method: .post, headers: headers, body: try Harness.body(["receipt": try Harness.receipt("501")]))
            #expect(replay.status == .conflict)
        }
        #expect(try await h.services.ledger.redemptions(AuditFilter()).map(\.clientAddress) == ["203.0.113.9"])
        #expect(try await h.services.ledger.attempts(AuditFilter()).map(\.clientAddress) == ["203.0.113.9"])

        let direct = try await Harness.make()
        defer { direct.cleanUp() }
        try await direct.app.test(.live) { client in
            var headers = Harness.jsonHeaders
            headers[.xForwardedFor] = "203.0.113.9"
            let created = try await client.execute(
                uri: "/v1/redemptions", method: .post, headers: headers, body: try Harness.body(["receipt": try Harness.receipt("502")]))
            #expect(created.status == .created)
        }
        #expect(try await direct.services.ledger.redemptions(AuditFilter()).map(\.clientAddress) == ["127.0.0.1"])
    }

    @Test func storageFailuresAre503NotBare500s() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        // Break the schema under the running server, as a corrupted or replaced file would.
        let queue = try DatabaseQueue(path: h.directory.appendingPathComponent("coffer.sqlite").path)
        try await queue.write { db in try db.execute(sql: "ALTER TABLE products RENAME TO products_moved") }
        try await h.app.test(.router) { client in
            let products = try await client.execute(uri: "/v1/admin/products", method: .get, headers: h.bearer(h.adminKey))
            #expect(products.status == .serviceUnavailable)
            #expect(Harness.code(products) == "storageUnavailable")
            #expect(products.headers[.retryAfter] == "1")
            let redeem = try await client.execute(
                uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["receipt": try Harness.receipt("77")]))
            #expect(redeem.status == .serviceUnavailable)
            #expect(Harness.code(redeem) == "storageUnavailable")
            #expect(try await client.execute(uri: "/readyz", method: .get).status == .serviceUnavailable)
        }
    }

    @Test("an export whose database does not answer is a 503 before anything is sent, not a 200 with an empty body")
    func exportsAskTheDatabaseBeforeThe200() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let auditor = h.bearer(h.auditorKey)
        try await h.app.test(.router) { client in
            let ok = try await client.execute(uri: "/v1/audit/export?kind=ledger", method: .get, headers: auditor)
            #expect(ok.status == .ok)
            let queue = try DatabaseQueue(path: h.directory.appendingPathComponent("coffer.sqlite").path)
            try await queue.write { db in
                try db.execute(sql: "ALTER TABLE redemptions RENAME TO redemptions_moved; ALTER TABLE attempts RENAME TO attempts_moved")
                try db.execute(sql: "ALTER TABLE ledger_events RENAME TO ledger_events_moved")
            }
            for query in ["format=ndjson", "format=csv", "kind=attempts", "kind=ledger"] {
                let export = try await client.execute(uri: "/v1/audit/export?\(query)", method: .get, headers: auditor)
                #expect(export.status == .serviceUnavailable, "\(query): \(export.status)")
                #expect(Harness.code(export) == "storageUnavailable", "\(query)")
            }
        }
    }

    @Test(
        "a stored time outside the range Coffer writes (1e300, written behind the server's back) is a 503 on SQLite's mapped records too, never a 500 or a trap"
    )
    func storedTimesOutOfRangeAre503() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let queue = try DatabaseQueue(path: h.directory.appendingPathComponent("coffer.sqlite").path)
        try await queue.write { db in try db.execute(sql: "UPDATE products SET updated_at = 1e300") }
        try await h.app.test(.router) { client in
            let products = try await client.execute(uri: "/v1/admin/products", method: .get, headers: h.bearer(h.adminKey))
            #expect(products.status == .serviceUnavailable)
            #expect(Harness.code(products) == "storageUnavailable")
        }
    }

    @Test func csvCellsCannotBecomeFormulas() {
        #expect(CSV.field("=HYPERLINK(\"http://x\")") == "\"'=HYPERLINK(\"\"http://x\"\")\"")
        #expect(CSV.field("+1") == "\"'+1\"")
        #expect(CSV.field("-2") == "\"'-2\"")
        #expect(CSV.field("@SUM(A1)") == "\"'@SUM(A1)\"")
        #expect(CSV.field("\tx") == "\"'\tx\"")
        #expect(CSV.field("plain, \"quoted\"") == "\"plain, \"\"quoted\"\"\"")
        #expect(CSV.field(nil) == "")
    }

    @Test func rateLimiterBucketsRefillAndStayBounded() {
        let limiter = RateLimiter(perMinute: 60, burst: 3, maxClients: 2)
        #expect((0..<3).map { _ in limiter.take("a", now: 100) } == [nil, nil, nil])
        #expect(limiter.take("a", now: 100) == 1, "empty: one token a second")
        #expect(limiter.take("a", now: 101) == nil, "refilled after a second")
        #expect(limiter.take("b", now: 101) == nil, "addresses are independent")
        _ = limiter.take("c", now: 101.5)
        #expect(limiter.trackedClients == 2, "never more than maxClients: the oldest went")
        _ = limiter.take("d", now: 500)
        #expect(limiter.trackedClients == 1, "idle (refilled) buckets are dropped first")
        #expect(RateLimiter(perMinute: 0, burst: 1).take("a") == nil, "0 disables")
    }

    /// A token given back counts again, and a bucket full again is forgotten: a purchase's
    /// refusal budget, taken before each redemption's write and given back when it inserts,
    /// tracks only the purchases that were refused.
    @Test func tokensGivenBackCountAgainAndFullBucketsAreForgotten() {
        let limiter = RateLimiter(perHour: 3600, burst: 2)
        #expect(limiter.take("p", now: 10) == nil)
        limiter.giveBack("p")
        #expect(limiter.trackedClients == 0, "full again: forgotten")
        #expect(limiter.take("p", now: 10) == nil && limiter.take("p", now: 10) == nil)
        #expect(limiter.take("p", now: 10) != nil, "both spent")
        limiter.giveBack("p")
        #expect(limiter.take("p", now: 10) == nil, "the one given back")
        #expect(limiter.trackedClients == 1)
        limiter.giveBack("never seen")
        #expect(limiter.trackedClients == 1)
    }

    @Test func redemptionFloodsGet429WithRetryAfter() async throws {
        let h = try await Harness.make(configure: {
            // One token a minute: three requests cannot straddle a refill, however loaded the
            // machine (at 6/min a CI run under load once took over 10 s for the three).
            $0.redemptionsPerMinute = 1
            $0.redemptionBurst = 2
        })
        defer { h.cleanUp() }
        try await h.app.test(.router) { client in
            var statuses: [HTTPResponse.Status] = []
            var last: TestResponse?
            for id in ["601", "602", "603"] {
                let r = try await client.execute(
                    uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["receipt": try Harness.receipt(id)]))
                statuses.append(r.status)
                last = r
            }
            #expect(statuses == [.created, .created, .tooManyRequests])
            let limited = try #require(last)
            #expect(Harness.code(limited) == "rateLimited")
            // Empty bucket at 1/min: the next token is at most 60 s away.
            #expect((1...60).contains(Int(limited.headers[.retryAfter] ?? "") ?? 0))
            let grant = try await client.execute(
                uri: "/v1/grants/tokens", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["grant": "x"]))
            #expect(grant.status == .tooManyRequests, "grant exchanges share the budget")
            let metrics = try await client.execute(uri: "/metrics", method: .get)
            #expect(String(buffer: metrics.body).contains("coffer_rate_limited_total{route=\"redemption\"} 2"))
        }
        // Refused before any work: not a ledger attempt, so a flood cannot fill the ledger.
        #expect(try await h.services.ledger.attempts(AuditFilter()).isEmpty)
    }

    @Test func repeatedBadKeysLockTheAddressOutWith429() async throws {
        let h = try await Harness.make(configure: { $0.authFailuresPerMinute = 3 })
        defer { h.cleanUp() }
        try await h.app.test(.router) { client in
            #expect(try await client.execute(uri: "/v1/audit/attempts", method: .get, headers: h.bearer(h.auditorKey)).status == .ok)
            for guess in 0..<3 {
                let r = try await client.execute(uri: "/v1/audit/attempts", method: .get, headers: h.bearer("cof_auditor_guess\(guess)"))
                #expect(r.status == .unauthorized)
            }
            let locked = try await client.execute(uri: "/v1/admin/products", method: .get, headers: h.bearer("cof_admin_guess"))
            #expect(locked.status == .tooManyRequests)
            #expect(Harness.code(locked) == "rateLimited")
            #expect(Int(locked.headers[.retryAfter] ?? "") ?? 0 >= 1)
            // The right key is never refused for the failures of others at its address
            // (NAT, proxies): the key is looked up first (HardeningHTTPTests covers the rest).
            #expect(try await client.execute(uri: "/v1/audit/attempts", method: .get, headers: h.bearer(h.auditorKey)).status == .ok)
        }
    }
}
