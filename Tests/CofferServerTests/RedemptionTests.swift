import CofferCore
import CofferSandbox
import CofferTestSupport
import Foundation
import Hummingbird
import HummingbirdTesting
import Testing

@testable import CofferServer

@Suite struct RedemptionTests {
    @Test func redeemDownloadAndReplay() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let receipt = try Harness.receipt("1000")
        try await h.app.test(.router) { client in
            let created = try await client.execute(
                uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["receipt": receipt]))
            #expect(created.status == .created)
            let json = try Harness.json(created)
            #expect(json["transactionId"] as? String == "1000")
            #expect(json["productId"] as? String == Harness.product)
            #expect(json["environment"] as? String == "LocalTesting")
            #expect((json["grant"] as? String)?.isEmpty == false)
            #expect(json["redemptionId"] is String)
            let assets = try #require(json["assets"] as? [[String: Any]])
            #expect(assets.count == 2)
            let level = try #require(assets.first { $0["assetId"] as? String == "level-1" })
            #expect(level["sha256"] as? String == h.levelBytes.sha256Hex)
            #expect(level["size"] as? Int == h.levelBytes.count)
            #expect(level["contentType"] as? String == "application/json")
            #expect(level["expiresAt"] is String)
            let url = try #require(level["url"] as? String)
            #expect(url.hasPrefix("/v1/downloads/"))

            let download = try await client.execute(uri: url, method: .get)
            #expect(download.status == .ok)
            #expect(Array(download.body.readableBytesView) == h.levelBytes)
            #expect(download.headers[.eTag] == "\"\(h.levelBytes.sha256Hex)\"")
            #expect(download.headers[.contentLength] == String(h.levelBytes.count))
            #expect(download.headers[.acceptRanges] == "bytes")
            #expect(download.headers[.contentType] == "application/json")
            // Bytes, never a page on Coffer's origin (the console lives there).
            #expect(download.headers[.contentDisposition] == "attachment; filename=\"level-1\"; filename*=UTF-8''level-1")
            #expect(download.headers[.xContentTypeOptions] == "nosniff")
            #expect(download.headers[.contentSecurityPolicy] == "default-src 'none'; sandbox")

            let head = try await client.execute(uri: url, method: .head)
            #expect(head.status == .ok)
            #expect(head.headers[.contentLength] == String(h.levelBytes.count))
            #expect(head.body.readableBytes == 0)

            let replay = try await client.execute(
                uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["receipt": receipt]))
            #expect(replay.status == .conflict)
            #expect(Harness.code(replay) == "alreadyRedeemed")
            #expect(replay.headers[.contentType] == "application/problem+json")
            let problem = try Harness.json(replay)
            #expect(problem["status"] as? Int == 409)
            #expect(problem["type"] is String && problem["title"] is String && problem["detail"] is String)
        }
        #expect(try await h.services.ledger.redemptions(AuditFilter()).count == 1)
        let attempts = try await h.services.ledger.attempts(AuditFilter())
        #expect(attempts.map(\.code) == ["alreadyRedeemed"])
        #expect(attempts.first?.transactionId == "1000")
    }

    @Test func signedTransactionSharesTheKeySpaceWithReceipts() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        var spec = TransactionSpec(bundleId: Harness.bundle, productId: Harness.product, transactionId: "2000")
        spec.appAccountToken = "7d2f8d32-0000-4000-8000-000000000001"
        let jws = try Harness.ca.mintTransaction(spec, now: Date())
        try await h.app.test(.router) { client in
            let first = try await client.execute(
                uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders,
                body: try Harness.body(["signedTransaction": jws, "appAccountToken": "7d2f8d32-0000-4000-8000-000000000001"]))
            #expect(first.status == .created)
            #expect(try Harness.json(first)["transactionId"] as? String == "2000")
            // The same purchase as a legacy receipt is a replay.
            let legacy = try await client.execute(
                uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["receipt": try Harness.receipt("2000")]))
            #expect(legacy.status == .conflict)
            #expect(Harness.code(legacy) == "alreadyRedeemed")
        }
        let rows = try await h.services.ledger.redemptions(AuditFilter())
        #expect(rows.first?.sourceFormat == .signedTransaction)
        #expect(rows.first?.appAccountToken == "7d2f8d32-0000-4000-8000-000000000001")
    }

    /// A body of many small values is refused before JSONDecoder parses it (its parse holds
    /// up to 24 times the body's bytes, which the body budget counts): 400, with no attempt
    /// recorded. Strings may hold any number of the characters counted; a product's 1,000
    /// asset ids still fit.
    @Test func aBodyOfManySmallValuesIsRefusedBeforeItIsParsed() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let many = "{\"receipt\":\"AAAA\",\"x\":[" + Array(repeating: "0", count: 5000).joined(separator: ",") + "]}"
        let keys = "{" + (0..<5000).map { "\"k\($0)\":0" }.joined(separator: ",") + ",\"receipt\":\"AAAA\"}"
        try await h.app.test(.router) { client in
            // UTF-16 and UTF-32, which JSONDecoder reads too: refused as not UTF-8 (the count would
            // misread them: in UTF-16 an escaped quote's backslash is not the byte before it).
            let tricky = "{\"receipt\":\"\\\"\",\"x\":[" + Array(repeating: "0", count: 5000).joined(separator: ",") + "]}"
            for encoding in [String.Encoding.utf16LittleEndian, .utf16BigEndian, .utf16, .utf32LittleEndian] {
                let data = try #require(tricky.data(using: encoding))
                let response = try await client.execute(
                    uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: ByteBuffer(bytes: data))
                #expect(response.status == .badRequest && Harness.code(response) == "malformedRequest", "\(encoding)")
                #expect(try Harness.json(response)["detail"] as? String == "request body is not the expected JSON: it must be UTF-8")
            }
            for body in [many, keys] {
                let response = try await client.execute(
                    uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: ByteBuffer(string: body))
                #expect(response.status == .badRequest)
                #expect(Harness.code(response) == "malformedRequest")
                #expect(
                    try Harness.json(response)["detail"] as? String == "request body is not the expected JSON: more than 4096 members and elements")
            }
            // Counted outside strings only: a receipt of commas and colons is a receipt (refused by its content).
            let stringy = try Harness.body(["receipt": String(repeating: ",:[{\\\"", count: 2000)])
            let refused = try await client.execute(uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: stringy)
            let refusedDetail = try Harness.json(refused)["detail"] as? String
            #expect(refusedDetail?.contains("members and elements") == false, "\(refused.status)")
            var headers = h.bearer(h.adminKey)
            headers[.contentType] = "application/json"
            let assets = (0..<1000).map { "asset-\($0)" }
            let product = try await client.execute(
                uri: "/v1/admin/products/com.coffer.demo.big", method: .put, headers: headers,
                body: try Harness.body(["bundleId": Harness.bundle, "title": "Big", "type": "nonConsumable", "assetIds": assets]))
            // Decoded, then judged by its content (none of the assets is uploaded).
            #expect(Harness.code(product) == "unknownAsset", "\(String(decoding: product.body.readableBytesView, as: UTF8.self))")
        }
        #expect(try await h.services.ledger.attempts(AuditFilter()).isEmpty)
    }

    /// The structure count skips strings by jumping from quote to quote: it must agree with a
    /// byte-by-byte reading on JSON whose strings hold quotes, backslashes (runs of them) and
    /// the counted characters. Seeded, so a failure repeats.
    @Test func theStructureCountSkipsExactlyTheStrings() throws {
        func slow(_ bytes: [UInt8]) -> Int {
            var count = 0
            var inString = false
            var escaped = false
            for byte in bytes {
                if inString {
                    if escaped {
                        escaped = false
                    } else if byte == UInt8(ascii: "\\") {
                        escaped = true
                    } else if byte == UInt8(ascii: "\"") {
                        inString = false
                    }
                } else if byte == UInt8(ascii: "\"") {
                    inString = true
                } else if "{[:,".utf8.contains(byte) {
                    count += 1
                }
            }
            return count
        }
        var rng = SplitMix64(state: 20_261_129)
        let alphabet = Array("ab,:[{\"\\}]")
        func text() -> String { String((0..<Int.random(in: 0...12, using: &rng)).map { _ in alphabet.randomElement(using: &rng) ?? "a" }) }
        func value(_ depth: Int) -> Any {
            switch Int.random(in: 0..<(depth > 3 ? 2 : 4), using: &rng) {
            case 0: return text()
            case 1: return Int.random(in: 0...99, using: &rng)
            case 2: return (0..<Int.random(in: 0...4, using: &rng)).map { _ in value(depth + 1) }
            default:
                return Dictionary((0..<Int.random(in: 0...4, using: &rng)).map { _ in (text(), value(depth + 1)) }, uniquingKeysWith: { a, _ in a })
            }
        }
        for _ in 0..<2000 {
            let bytes = Array(try JSONSerialization.data(withJSONObject: [text(): value(0)]))
            let fast = bytes.withUnsafeBytes { JSON.structure($0, atMost: .max - 1) }
            #expect(fast == slow(bytes), "\(String(decoding: bytes, as: UTF8.self))")
        }
        #expect([UInt8]().withUnsafeBytes { JSON.structure($0, atMost: 10) } == 0)
        #expect(Array(#"{"a":"unterminated,,,"#.utf8).withUnsafeBytes { JSON.structure($0, atMost: 10) } == 2)
    }

    /// Refusals of proofs that did not verify are budgeted per address (each is a chained row
    /// for good): past `--rate-recorded-refusals` one is answered the same, counted and not
    /// written; with the budget off (0), each is written. A verified proof's refusal (an
    /// unknown product, a replay) is written whatever the budget: junk first cannot hide it.
    @Test func refusalsBeyondAnAddressesBudgetAreCountedNotWritten() async throws {
        for (budget, written) in [(3, 3), (0, 5)] {
            let h = try await Harness.make(trustedProxies: ["127.0.0.1"]) { $0.recordedRefusalsPerHour = budget }
            defer { h.cleanUp() }
            try await h.app.test(.router) { client in
                for _ in 0..<5 {
                    let junk = try await client.execute(
                        uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["receipt": "AAAA"]))
                    #expect(junk.status == .badRequest && Harness.code(junk) == "malformed")
                }
                let metrics = String(buffer: try await client.execute(uri: "/metrics", method: .get).body)
                #expect(metrics.contains("coffer_refusals_unrecorded_total \(5 - written)"), "\(metrics)")
                let unknown = try await client.execute(
                    uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders,
                    body: try Harness.body(["receipt": try Harness.receipt("77", product: "com.coffer.demo.unknown")]))
                #expect(Harness.code(unknown) == "unknownProduct")
            }
            let attempts = try await h.services.ledger.attempts(AuditFilter())
            #expect(attempts.count == written + 1, "budget \(budget)")
            #expect(attempts.last?.code == "unknownProduct")
            #expect(try await LedgerHardeningTests.audit(h).intact)
        }
    }

    /// One real purchase replayed over and over (from a botnet, say) adds at most its budget of
    /// chained rows an hour: the rest are refused alike and counted. Off, every one is written.
    @Test func replaysOfOnePurchaseBeyondItsBudgetAreCountedNotWritten() async throws {
        let budget = 20
        for (perAddress, written) in [(120, budget), (0, budget + 5)] {
            let h = try await Harness.make {
                $0.recordedRefusalsPerHour = perAddress
                $0.recordedRefusalsPerPurchasePerHour = budget
            }
            defer { h.cleanUp() }
            try await h.app.test(.router) { client in
                let body = try Harness.body(["receipt": try Harness.receipt("9100")])
                let first = try await client.execute(uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: body)
                #expect(first.status == .created)
                for _ in 0..<(budget + 5) {
                    let replay = try await client.execute(uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: body)
                    #expect(replay.status == .conflict && Harness.code(replay) == "alreadyRedeemed")
                }
                let metrics = String(buffer: try await client.execute(uri: "/metrics", method: .get).body)
                #expect(metrics.contains("coffer_refusals_unrecorded_total \(budget + 5 - written)"), "\(metrics)")
            }
            var filter = AuditFilter()
            filter.limit = 1000
            let attempts = try await h.services.ledger.attempts(filter)
            #expect(attempts.count == written, "per-address budget \(perAddress)")
            #expect(attempts.allSatisfy { $0.code == "alreadyRedeemed" && $0.transactionId == "9100" })
            #expect(try await LedgerHardeningTests.audit(h).intact)
        }
    }

    /// Replays arriving together (one batch of the ledger's writer) each take from the budget
    /// before the write: asked only, every one would have been told yes and written (a budget of
    /// 20 here, 600 by default).
    @Test func concurrentReplaysOfOnePurchaseStayWithinItsBudget() async throws {
        let budget = 20
        let h = try await Harness.make {
            $0.redemptionsPerMinute = 0
            $0.recordedRefusalsPerPurchasePerHour = budget
        }
        defer { h.cleanUp() }
        try await h.app.test(.router) { client in
            let body = try Harness.body(["receipt": try Harness.receipt("9200")])
            #expect(try await client.execute(uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: body).status == .created)
            let statuses = try await withThrowingTaskGroup(of: HTTPResponse.Status.self) { group in
                for _ in 0..<(budget * 5) {
                    group.addTask { try await client.execute(uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: body).status }
                }
                return try await group.reduce(into: [HTTPResponse.Status]()) { $0.append($1) }
            }
            #expect(statuses.allSatisfy { $0 == .conflict }, "\(Set(statuses.map(\.code)))")
        }
        var filter = AuditFilter()
        filter.limit = 1000
        #expect(try await h.services.ledger.attempts(filter).count == budget)
    }

    @Test func requestErrors() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        try await h.app.test(.router) { client in
            func post(_ body: ByteBuffer) async throws -> TestResponse {
                try await client.execute(uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: body)
            }
            let cases: [(ByteBuffer, HTTPResponse.Status, String)] = [
                (ByteBuffer(string: "not json"), .badRequest, "malformedRequest"),
                (try Harness.body([:]), .badRequest, "malformedRequest"),
                (try Harness.body(["receipt": "AAAA", "signedTransaction": "eyJ"]), .badRequest, "malformedRequest"),
                (try Harness.body(["receipt": "!!!not base64!!!"]), .badRequest, "malformedRequest"),
                (try Harness.body(["receipt": 42]), .badRequest, "malformedRequest"),
                (try Harness.body(["receipt": Data([0x30, 0x03, 0x02, 0x01, 0x01]).base64EncodedString()]), .badRequest, "malformed"),
                (try Harness.body(["signedTransaction": "eyJhbGciOiJub25lIn0.e30."]), .unprocessableContent, "unsupportedAlgorithm"),
                (try Harness.body(["receipt": try Harness.receipt("1", bundle: "com.evil.clone")]), .unprocessableContent, "bundleMismatch"),
                (try Harness.body(["receipt": try Harness.receipt("2", product: "com.coffer.demo.unknown")]), .notFound, "unknownProduct"),
                (try Harness.body(["receipt": try Harness.receipt("3", cancelled: true)]), .gone, "revoked"),
                (try Harness.body(["receipt": try Harness.receipt("4"), "transactionId": "999"]), .unprocessableContent, "transactionNotInReceipt"),
            ]
            for (body, status, code) in cases {
                let response = try await post(body)
                #expect(response.status == status, "\(code): got \(response.status)")
                #expect(Harness.code(response) == code)
            }
            // A JWS payload field of the wrong type (read before the signature): the field named,
            // no Swift internals (a DecodingError's dump) in the answer or the attempt's detail.
            let payload = Data(#"{"transactionId":"1","bundleId":"x","quantity":"two"}"#.utf8).base64EncodedString()
                .replacingOccurrences(of: "=", with: "").replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            let wrongType = "eyJhbGciOiJFUzI1NiJ9.\(payload).c2ln"
            let typed = try await post(try Harness.body(["signedTransaction": wrongType]))
            #expect(typed.status == .badRequest && Harness.code(typed) == "malformed")
            let detail = try #require(try Harness.json(typed)["detail"] as? String)
            #expect(detail == "JWS payload field has the wrong type: quantity")
            var byCode = AuditFilter()
            byCode.code = "malformed"
            let recorded = try await h.services.ledger.attempts(byCode).map(\.detail)
            #expect(recorded.contains(detail) && !recorded.contains { $0.contains("DecodingError") || $0.contains("Swift.") })
            // Another CA's receipt: untrusted chain.
            let other = try SandboxCA.create(now: Date())
            let foreign = Data(
                try other.mintReceipt(
                    ReceiptSpec(bundleId: Harness.bundle, purchases: [PurchaseSpec(productId: Harness.product, transactionId: "5")]), now: Date()))
            let untrusted = try await post(try Harness.body(["receipt": foreign.base64EncodedString()]))
            #expect(untrusted.status == .unprocessableContent)
            #expect(Harness.code(untrusted) == "chainUntrusted")
            // Two catalogue purchases in one receipt: the client must name one.
            let two = Data(
                try Harness.ca.mintReceipt(
                    ReceiptSpec(
                        bundleId: Harness.bundle,
                        purchases: [
                            PurchaseSpec(productId: Harness.product, transactionId: "6"),
                            PurchaseSpec(productId: "com.coffer.demo.levelpack2", transactionId: "7"),
                        ]), now: Date())
            ).base64EncodedString()
            let ambiguous = try await post(try Harness.body(["receipt": two]))
            #expect(ambiguous.status == .unprocessableContent)
            #expect(Harness.code(ambiguous) == "transactionRequired")
            let named = try await post(try Harness.body(["receipt": two, "transactionId": "7"]))
            #expect(named.status == .created)
            #expect(try Harness.json(named)["productId"] as? String == "com.coffer.demo.levelpack2")
            // Revoked StoreKit 2 transaction.
            var revokedSpec = TransactionSpec(bundleId: Harness.bundle, productId: Harness.product, transactionId: "8")
            revokedSpec.revocationDate = Date()
            let revoked = try await post(try Harness.body(["signedTransaction": try Harness.ca.mintTransaction(revokedSpec, now: Date())]))
            #expect(revoked.status == .gone)
            #expect(Harness.code(revoked) == "revoked")
            // Oversized body.
            let huge = try await post(ByteBuffer(repeating: 0x41, count: 9 * 1024 * 1024))
            #expect(huge.status == .contentTooLarge)
            #expect(Harness.code(huge) == "payloadTooLarge")
        }
        let codes = Set(try await h.services.ledger.attempts(AuditFilter()).map(\.code))
        #expect(
            codes.isSuperset(of: ["bundleMismatch", "unknownProduct", "revoked", "transactionNotInReceipt", "chainUntrusted", "transactionRequired"]))
    }

    @Test func grantsMintFreshTokens() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        try await h.app.test(.router) { client in
            let created = try await client.execute(
                uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["receipt": try Harness.receipt("3000")]))
            let grant = try #require(try Harness.json(created)["grant"] as? String)
            let fresh = try await client.execute(
                uri: "/v1/grants/tokens", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["grant": grant]))
            #expect(fresh.status == .ok)
            let json = try Harness.json(fresh)
            #expect(json["grant"] == nil, "the grant is never echoed")
            #expect((json["assets"] as? [Any])?.count == 2)
            let bad = try await client.execute(
                uri: "/v1/grants/tokens", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["grant": "nope"]))
            #expect(bad.status == .forbidden)
            #expect(Harness.code(bad) == "grantInvalid")
            let malformed = try await client.execute(
                uri: "/v1/grants/tokens", method: .post, headers: Harness.jsonHeaders, body: ByteBuffer(string: "[]"))
            #expect(malformed.status == .badRequest)
        }
    }

    @Test func downloadTokenErrorsAndRanges() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let sha = h.levelBytes.sha256Hex
        let good = h.services.tokens.mint(
            DownloadClaims(assetId: "level-1", sha256: sha, redemptionId: "r", expiresAt: Int64(Date().timeIntervalSince1970) + 60))
        let expired = h.services.tokens.mint(
            DownloadClaims(assetId: "level-1", sha256: sha, redemptionId: "r", expiresAt: Int64(Date().timeIntervalSince1970) - 1))
        let forged = TokenSigner(active: TokenKey(id: "k1", key: .init(size: .bits256)))
            .mint(DownloadClaims(assetId: "level-1", sha256: sha, redemptionId: "r", expiresAt: Int64(Date().timeIntervalSince1970) + 60))
        try await h.app.test(.router) { client in
            for (token, code) in [(expired, "tokenExpired"), (forged, "tokenInvalid"), ("garbage", "tokenInvalid"), (good + "x", "tokenInvalid")] {
                let response = try await client.execute(uri: "/v1/downloads/\(token)", method: .get)
                #expect(response.status == .forbidden)
                #expect(Harness.code(response) == code)
                #expect(String(decoding: response.body.readableBytesView, as: UTF8.self).contains(token) == false, "tokens never echoed")
            }
            let partial = try await client.execute(uri: "/v1/downloads/\(good)", method: .get, headers: [.range: "bytes=2-5"])
            #expect(partial.status == .partialContent)
            #expect(Array(partial.body.readableBytesView) == Array(h.levelBytes[2...5]))
            #expect(partial.headers[.contentRange] == "bytes 2-5/\(h.levelBytes.count)")
            let suffix = try await client.execute(uri: "/v1/downloads/\(good)", method: .get, headers: [.range: "bytes=-3"])
            #expect(Array(suffix.body.readableBytesView) == Array(h.levelBytes.suffix(3)))
            let open = try await client.execute(uri: "/v1/downloads/\(good)", method: .get, headers: [.range: "bytes=10-"])
            #expect(Array(open.body.readableBytesView) == Array(h.levelBytes[10...]))
            let unsatisfiable = try await client.execute(uri: "/v1/downloads/\(good)", method: .get, headers: [.range: "bytes=9999-"])
            #expect(unsatisfiable.status == .rangeNotSatisfiable)
            #expect(unsatisfiable.headers[.contentRange] == "bytes */\(h.levelBytes.count)")
            #expect(Harness.code(unsatisfiable) == "rangeNotSatisfiable")
            let multi = try await client.execute(uri: "/v1/downloads/\(good)", method: .get, headers: [.range: "bytes=0-1,3-4"])
            #expect(multi.status == .ok, "several ranges: the whole file")
        }
    }

    @Test func byteRangeParsing() {
        #expect(ByteRange.parse("bytes=0-0", size: 10) == .range(0...0))
        #expect(ByteRange.parse("bytes=5-100", size: 10) == .range(5...9))
        #expect(ByteRange.parse("bytes=-100", size: 10) == .range(0...9))
        #expect(ByteRange.parse("bytes=10-", size: 10) == .unsatisfiable)
        #expect(ByteRange.parse("bytes=-0", size: 10) == .unsatisfiable)
        #expect(ByteRange.parse("bytes=5-4", size: 10) == .ignore)
        #expect(ByteRange.parse("items=0-1", size: 10) == .ignore)
        #expect(ByteRange.parse("bytes=a-b", size: 10) == .ignore)
    }

    @Test func healthReadinessAndMetrics() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        try await h.app.test(.router) { client in
            #expect(try await client.execute(uri: "/healthz", method: .get).status == .ok)
            #expect(try await client.execute(uri: "/readyz", method: .get).status == .ok)
            _ = try await client.execute(
                uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["receipt": try Harness.receipt("4000")]))
            let metrics = try await client.execute(uri: "/metrics", method: .get)
            let text = String(decoding: metrics.body.readableBytesView, as: UTF8.self)
            #expect(metrics.status == .ok)
            #expect(text.contains("coffer_redemptions_total{result=\"redeemed\"} 1"))
            #expect(text.contains("coffer_redemption_seconds"))
            let missing = try await client.execute(uri: "/nope", method: .get)
            #expect(missing.status == .notFound)
        }
    }
}
