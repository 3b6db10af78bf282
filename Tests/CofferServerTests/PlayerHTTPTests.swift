import CofferCore
import CofferSandbox
import CofferServer
import CofferStore
import Crypto
import Foundation
import GRDB
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

/// Player identity over HTTP: tokens of the game's login service, signed here by hand (not by
/// jwt-kit, which verifies them) with a P-256 key given as PEM and an Ed25519 key in a JWKS;
/// restore, entitlements and delivery evidence.
@Suite struct PlayerHTTPTests {
    static let issuer = "https://login.example.com"
    static let audience = "coffer-demo"
    let ecKey = P256.Signing.PrivateKey()
    let edKey = Curve25519.Signing.PrivateKey()

    /// A compact JWS of `claims` with `header`, signed by `sign`.
    static func jwt(_ header: [String: Any], _ claims: [String: Any], sign: ([UInt8]) throws -> [UInt8]) throws -> String {
        let input =
            Base64.encodeURL(try JSONSerialization.data(withJSONObject: header, options: [.sortedKeys])) + "."
            + Base64.encodeURL(try JSONSerialization.data(withJSONObject: claims, options: [.sortedKeys]))
        return input + "." + Base64.encodeURL(try sign(Array(input.utf8)))
    }

    static func claims(sub: String, iss: String = issuer, aud: Any = audience, exp: TimeInterval = 300, extra: [String: Any] = [:]) -> [String: Any] {
        ["sub": sub, "iss": iss, "aud": aud, "exp": Date().timeIntervalSince1970 + exp, "iat": Date().timeIntervalSince1970].merging(extra) { $1 }
    }

    func es256(_ claims: [String: Any]) throws -> String {
        try Self.jwt(["alg": "ES256", "typ": "JWT"], claims) { Array(try ecKey.signature(for: SHA256.hash(data: $0)).rawRepresentation) }
    }

    func eddsa(_ claims: [String: Any], kid: String = "ed-1") throws -> String {
        try Self.jwt(["alg": "EdDSA", "kid": kid], claims) { Array(try edKey.signature(for: $0)) }
    }

    /// The harness with player identity: the P-256 key as a PEM file, the Ed25519 key in a JWKS.
    func harness(accountClaim: String = "sub") async throws -> Harness {
        var h = try await Harness.make()
        let pem = h.directory.appendingPathComponent("player-es256.pem")
        try ecKey.publicKey.pemRepresentation.write(to: pem, atomically: true, encoding: .utf8)
        let jwks = h.directory.appendingPathComponent("player.jwks")
        let document: [String: Any] = [
            "keys": [["kty": "OKP", "crv": "Ed25519", "kid": "ed-1", "x": Base64.encodeURL(edKey.publicKey.rawRepresentation)]]
        ]
        try JSONSerialization.data(withJSONObject: document).write(to: jwks)
        h.players = try await PlayerTokens.load(
            keyFiles: [pem.path, jwks.path], issuer: Self.issuer, audience: Self.audience, accountClaim: accountClaim)
        try await h.services.catalogue.putLoggedProduct(
            Product(
                productId: "com.coffer.demo.season1", bundleId: Harness.bundle, type: .autoRenewable, assetIds: ["level-1"], title: "Season",
                updatedAt: Date()))
        return h
    }

    static func redeem(_ client: some TestClientProtocol, _ body: [String: Any], token: String?) async throws -> TestResponse {
        var headers = Harness.jsonHeaders
        if let token { headers[.authorization] = "Bearer \(token)" }
        return try await client.execute(uri: "/v1/redemptions", method: .post, headers: headers, body: try Harness.body(body))
    }

    @Test func redemptionsNeedAValidPlayerTokenAndBindThePurchaseToThePlayer() async throws {
        let h = try await harness()
        defer { h.cleanUp() }
        let alice = UUID().uuidString.lowercased()
        let bob = UUID().uuidString.lowercased()
        let receipt = try Harness.receipt("8100")
        try await h.app.test(.router) { client in
            let missing = try await Self.redeem(client, ["receipt": receipt], token: nil)
            #expect(missing.status == .unauthorized && Harness.code(missing) == "playerTokenRequired")
            #expect(missing.headers[.wwwAuthenticate]?.hasPrefix("Bearer") == true)

            // Refused tokens, each with its code; none reaches the verifier or the ledger.
            let hs256 = try Self.jwt(["alg": "HS256", "typ": "JWT"], Self.claims(sub: alice)) { input in
                Array(HMAC<SHA256>.authenticationCode(for: input, using: SymmetricKey(data: Array(ecKey.publicKey.pemRepresentation.utf8))))
            }
            let none = try Self.jwt(["alg": "none"], Self.claims(sub: alice)) { _ in [] }
            let stranger = try Self.jwt(["alg": "ES256"], Self.claims(sub: alice)) {
                Array(try P256.Signing.PrivateKey().signature(for: SHA256.hash(data: $0)).rawRepresentation)
            }
            let tampered = try es256(Self.claims(sub: alice)).dropLast(2) + "AA"
            let refused: [(String, HTTPResponse.Status, String)] = [
                (try es256(Self.claims(sub: alice, exp: -10)), .unauthorized, "playerTokenInvalid"),
                (try es256(Self.claims(sub: alice, iss: "https://evil.example")), .forbidden, "playerTokenRejected"),
                (try es256(Self.claims(sub: alice, aud: ["other-game"])), .forbidden, "playerTokenRejected"),
                (try eddsa(Self.claims(sub: alice, aud: "other-game")), .forbidden, "playerTokenRejected"),
                (hs256, .unauthorized, "playerTokenInvalid"), (none, .unauthorized, "playerTokenInvalid"),
                (stranger, .unauthorized, "playerTokenInvalid"), (String(tampered), .unauthorized, "playerTokenInvalid"),
                (try es256(Self.claims(sub: "bad\u{0}sub")), .unauthorized, "playerTokenInvalid"),
                ("not-a-jwt", .unauthorized, "playerTokenInvalid"),
            ]
            for (token, status, code) in refused {
                let response = try await Self.redeem(client, ["receipt": receipt], token: token)
                #expect(response.status == status && Harness.code(response) == code, "\(token.prefix(40))…: \(response.status)")
            }
            #expect(try await h.services.ledger.attempts(AuditFilter()).isEmpty, "refused before verification")

            // Alice redeems (ES256 key from PEM); on her new device (EdDSA key from the JWKS) she restores: 200.
            let first = try await Self.redeem(client, ["receipt": receipt], token: try es256(Self.claims(sub: alice)))
            #expect(first.status == .created)
            let restored = try await Self.redeem(client, ["receipt": receipt], token: try eddsa(Self.claims(sub: alice)))
            #expect(restored.status == .ok)
            let body = try Harness.json(restored)
            #expect(body["restored"] as? Bool == true && body["grant"] == nil && (body["assets"] as? [Any])?.count == 2)
            // Bob presenting Alice's receipt: 409.
            let stolen = try await Self.redeem(client, ["receipt": receipt], token: try es256(Self.claims(sub: bob)))
            #expect(stolen.status == .conflict && Harness.code(stolen) == "alreadyRedeemed")
            let rows = try await h.services.ledger.redemptions(AuditFilter())
            #expect(rows.map(\.playerId) == [alice])

            // A signed appAccountToken that is not the player's account: 422.
            var spec = TransactionSpec(bundleId: Harness.bundle, productId: "com.coffer.demo.levelpack2", transactionId: "8101")
            spec.appAccountToken = bob
            let mismatch = try await Self.redeem(
                client, ["signedTransaction": try Harness.ca.mintTransaction(spec, now: Date())], token: try es256(Self.claims(sub: alice)))
            #expect(mismatch.status == .unprocessableContent && Harness.code(mismatch) == "accountMismatch")
        }
    }

    @Test func aNewDeviceListsItsEntitlementsWithoutAReceiptAndDownloadsAreEvidence() async throws {
        let h = try await harness(accountClaim: "account")
        defer { h.cleanUp() }
        let alice = "alice-42"
        let account = UUID().uuidString.lowercased()
        let token = try eddsa(Self.claims(sub: alice, extra: ["account": account]))
        try await h.app.test(.router) { client in
            #expect(try await client.execute(uri: "/v1/entitlements", method: .get).status == .unauthorized)
            var pass = TransactionSpec(bundleId: Harness.bundle, productId: "com.coffer.demo.season1", transactionId: "8200")
            pass.type = "Auto-Renewable Subscription"
            pass.expiresDate = Date().addingTimeInterval(3600)
            pass.appAccountToken = account
            let bought = try await Self.redeem(client, ["signedTransaction": try Harness.ca.mintTransaction(pass, now: Date())], token: token)
            #expect(bought.status == .created)
            #expect((try Harness.json(bought))["entitlementEndsAt"] is String)
            _ = try await Self.redeem(client, ["receipt": try Harness.receipt("8201")], token: token)

            let listed = try await client.execute(uri: "/v1/entitlements", method: .get, headers: [.authorization: "Bearer \(token)"])
            #expect(listed.status == .ok)
            let items = try #require((try Harness.json(listed))["items"] as? [[String: Any]])
            #expect(items.map { $0["productId"] as? String } == ["com.coffer.demo.season1", Harness.product])
            #expect(items.allSatisfy { $0["state"] as? String == "active" })
            let url = try #require(((items[1]["assets"] as? [[String: Any]])?.first?["url"]) as? String)
            let full = try await client.execute(uri: url, method: .get)
            #expect(full.status == .ok && Array(full.body.readableBytesView) == h.levelBytes)
            let part = try await client.execute(uri: url, method: .get, headers: [.range: "bytes=0-3"])
            #expect(part.status == .partialContent)
            _ = try await client.execute(uri: url, method: .head)

            // The evidence, once the recorder wrote its batch.
            await h.deliveries.flush()
            let rows = try #require(
                (try Harness.json(try await client.execute(uri: "/v1/audit/deliveries", method: .get, headers: h.bearer(h.auditorKey))))["items"]
                    as? [[String: Any]])
            #expect(rows.count == 1)
            let row = try #require(rows.first)
            #expect(row["downloads"] as? Int == 2 && row["completed"] as? Int == 2 && row["complete"] as? Bool == true)
            #expect(row["bytesServed"] as? Int == h.levelBytes.count + 4 && row["assetId"] as? String == "level-1")
            let csv = try await client.execute(uri: "/v1/audit/export?kind=deliveries&format=csv", method: .get, headers: h.bearer(h.auditorKey))
            let lines = String(buffer: csv.body).split(separator: "\n")
            #expect(lines.first == "sequence,redemptionId,assetId,sha256,firstAt,lastAt,downloads,completed,bytesServed,complete" && lines.count == 2)
            // The players' events (none yet: no restore) and the redemptions by player.
            let byPlayer = try await client.execute(uri: "/v1/audit/redemptions?playerId=alice-42", method: .get, headers: h.bearer(h.auditorKey))
            #expect(((try Harness.json(byPlayer))["items"] as? [Any])?.count == 2)
        }
    }

    /// An insider with the database file inserts rows the chain does not cover (INSERT passes
    /// the append-only triggers): an event extending a lapsed pass, a redemption bound to their
    /// player. Neither counts; the server refuses to start on them; `verify` names them.
    @Test func rowsInsertedBehindTheServersBackGrantNothing() async throws {
        let h = try await harness()
        defer { h.cleanUp() }
        let mallory = Player(id: "mallory", accountToken: nil)
        var pass = TransactionSpec(bundleId: Harness.bundle, productId: "com.coffer.demo.season1", transactionId: "8300")
        pass.type = "Auto-Renewable Subscription"
        let end = Date().addingTimeInterval(60)
        pass.expiresDate = end
        let vault = h.vault
        let bought = try await vault.redeem(
            RedemptionRequest(
                proof: .signedTransaction(try Harness.ca.mintTransaction(pass, now: Date())), clientAddress: "192.0.2.9", player: mallory),
            now: Date())
        let key = try #require(bought.redemption.replayKey)
        let queue = try DatabaseQueue(path: h.directory.appendingPathComponent("coffer.sqlite").path)
        try await queue.write { db in
            try db.execute(
                sql: """
                    INSERT INTO purchase_events (at, kind, environment, replay_key, redemption_id, transaction_id, detail, source, reference, expires_at)
                    VALUES (?, 'renewal', ?, ?, ?, '8301', 'forged', 'client', 'x', ?)
                    """, arguments: [Date().timeIntervalSince1970, bought.redemption.environment, key, bought.redemption.redemptionId, 4_102_444_800])
            try db.execute(
                sql: """
                    INSERT INTO redemptions (redemption_id, transaction_id, product_id, bundle_id, environment, quantity, receipt_sha256,
                      source_format, redeemed_at, client_address, status, grant_hash, replay_key, player_id)
                    VALUES ('forged', '8302', ?, ?, 'LocalTesting', 1, 'x', 'signedTransaction', 0, 'x', 'redeemed', 'forged-grant', '8302', 'mallory')
                    """, arguments: [Harness.product, Harness.bundle])
        }
        let later = end.addingTimeInterval(1)
        let grant = try #require(bought.grant)
        let failure = await #expect(throws: VaultFailure.self) { _ = try await vault.exchange(grant: grant, now: later) }
        #expect(failure?.code == .entitlementExpired, "the forged event does not extend the pass")
        let owned = try await vault.entitlements(of: mallory, now: later).items
        #expect(owned.map(\.entitlement.redemption.redemptionId) == [bought.redemption.redemptionId])
        #expect(owned.first?.entitlement.state == .expired && owned.first?.assets.isEmpty == true)
        let unchained = try await h.services.ledger.unchainedRows(limit: 10)
        #expect(unchained.map(\.kind).sorted { $0.rawValue < $1.rawValue } == [.purchaseEvent, .redemption])
    }
}
