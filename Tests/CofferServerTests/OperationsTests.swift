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

    @Test func csvCellsCannotBecomeFormulas() {
        #expect(CSV.field("=HYPERLINK(\"http://x\")") == "\"'=HYPERLINK(\"\"http://x\"\")\"")
        #expect(CSV.field("+1") == "\"'+1\"")
        #expect(CSV.field("-2") == "\"'-2\"")
        #expect(CSV.field("@SUM(A1)") == "\"'@SUM(A1)\"")
        #expect(CSV.field("\tx") == "\"'\tx\"")
        #expect(CSV.field("plain, \"quoted\"") == "\"plain, \"\"quoted\"\"\"")
        #expect(CSV.field(nil) == "")
    }
}
