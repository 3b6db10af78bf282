import CofferCore
import CofferSandbox
import Foundation
import Testing

@Suite struct SandboxJWSTests {
    let spec = TransactionSpec(bundleId: "com.coffer.demo", productId: "level.pack.1", transactionId: "5000")

    func mint(_ encoding: JWSEncoding = .init()) throws -> [UInt8] {
        Array(try sharedCA.mintTransaction(spec, now: testNow, encoding: encoding).utf8)
    }

    @Test func validTransaction() async throws {
        let result = try await sandboxVerifier().verify(try mint(), now: testNow)
        guard case .valid(let evidence) = result, case .transaction(let t) = evidence.signed else {
            Issue.record("\(result.error.map { "\($0)" } ?? "not a transaction")")
            return
        }
        #expect(t.transactionId == "5000")
        #expect(evidence.environment == .localTesting)
        #expect(evidence.signing?.chain.count == 3)
    }

    @Test(arguments: ["none", "HS256", "RS256", "ES384"])
    func otherAlgorithmsAreRejected(alg: String) async throws {
        var encoding = JWSEncoding()
        encoding.alg = alg
        expectInvalid(try await sandboxVerifier().verify(try mint(encoding), now: testNow), .unsupportedAlgorithm)
    }

    @Test func unsignedAlgNoneWithEmptySignatureIsRejected() async throws {
        let parts = String(decoding: try mint(), as: UTF8.self).split(separator: ".")
        let forged = Base64.encodeURL(Array(#"{"alg":"none"}"#.utf8)) + "." + parts[1] + "."
        expectInvalid(try await sandboxVerifier().verify(Array(forged.utf8), now: testNow), .unsupportedAlgorithm)
    }

    @Test(arguments: [JWSEncoding.Chain.leafAndIntermediate, .withExtra])
    func x5cOfTwoOrFourCertificatesIsRejected(chain: JWSEncoding.Chain) async throws {
        var encoding = JWSEncoding()
        encoding.chain = chain
        expectInvalid(try await sandboxVerifier().verify(try mint(encoding), now: testNow), .chainLengthInvalid)
    }

    @Test func singleSelfIssuedCertificateIsUntrustedWithoutAnXcodeAnchor() async throws {
        var encoding = JWSEncoding()
        encoding.chain = .leafOnly
        expectInvalid(try await sandboxVerifier().verify(try mint(encoding), now: testNow), .chainUntrusted)
    }

    @Test func swappedLeafAndIntermediateIsRejected() async throws {
        var encoding = JWSEncoding()
        encoding.chain = .swapped
        expectInvalid(try await sandboxVerifier().verify(try mint(encoding), now: testNow), .chainUntrusted)
    }

    /// A header padded around a valid chain (cached by its bytes) and a payload of JSON
    /// decoded before any check are refused by their length: over 16 KiB and 128 KiB.
    @Test func oversizedHeaderAndPayloadAreRejected() async throws {
        let parts = String(decoding: try mint(), as: UTF8.self).split(separator: ".").map(String.init)
        let header = try #require(Base64.decodeURL(parts[0]))
        let payload = try #require(Base64.decodeURL(parts[1]))
        func padded(_ json: [UInt8], _ count: Int) -> String {
            Base64.encodeURL(Array(json.dropLast()) + Array(#","pad":""#.utf8) + Array(repeating: 0x61, count: count) + Array(#""}"#.utf8))
        }
        func result(_ jws: String) async throws -> VerificationResult {
            try await sandboxVerifier().verify(Array(jws.utf8), now: testNow)
        }
        let bigHeader = try await result([padded(header, 13_000), parts[1], parts[2]].joined(separator: "."))
        #expect(bigHeader.error?.code == .limitExceeded, "\(bigHeader.error.map { "\($0)" } ?? "valid")")
        let bigPayload = try await result([parts[0], padded(payload, 100_000), parts[2]].joined(separator: "."))
        #expect(bigPayload.error?.code == .limitExceeded, "\(bigPayload.error.map { "\($0)" } ?? "valid")")
        // Under the limits the same padding is read, and the signature (over the unpadded
        // bytes) does not verify.
        let header9k = try await result([padded(header, 6_000), parts[1], parts[2]].joined(separator: "."))
        #expect(header9k.error?.code == .signatureInvalid, "\(header9k.error.map { "\($0)" } ?? "valid")")
        let payload90k = try await result([parts[0], padded(payload, 90_000), parts[2]].joined(separator: "."))
        #expect(payload90k.error?.code == .signatureInvalid, "\(payload90k.error.map { "\($0)" } ?? "valid")")
    }

    @Test func missingX5CIsRejected() async throws {
        var encoding = JWSEncoding()
        encoding.chain = .none
        expectInvalid(try await sandboxVerifier().verify(try mint(encoding), now: testNow), .certificateChainMissing)
    }

    @Test func tamperedPayloadIsRejected() async throws {
        let parts = String(decoding: try mint(), as: UTF8.self).split(separator: ".")
        var payload = try #require(Base64.decodeURL(parts[1]))
        let text = String(decoding: payload, as: UTF8.self).replacingOccurrences(of: "level.pack.1", with: "level.pack.9")
        payload = Array(text.utf8)
        let forged = parts[0] + "." + Base64.encodeURL(payload) + "." + parts[2]
        let result = try await sandboxVerifier().verify(Array(forged.utf8), now: testNow)
        expectInvalid(result, .signatureInvalid)
    }

    @Test func tamperedSignatureIsRejected() async throws {
        var jws = try mint()
        jws[jws.count - 5] = jws[jws.count - 5] == 0x41 ? 0x42 : 0x41
        expectInvalid(try await sandboxVerifier().verify(jws, now: testNow), .signatureInvalid)
    }

    @Test func x5cRootBytesAreNeverTrusted() async throws {
        // An attacker's own CA, shaped like ours, signs a JWS whose x5c[2] is *our* root.
        let attacker = try SandboxCA.create(now: testNow)
        var jws = String(decoding: Array(try attacker.mintTransaction(spec, now: testNow).utf8), as: UTF8.self)
        let header = try #require(Base64.decodeURL(jws.split(separator: ".")[0]))
        var object = try #require(try JSONSerialization.jsonObject(with: Data(header)) as? [String: Any])
        var x5c = try #require(object["x5c"] as? [String])
        x5c[2] = Data(sharedCA.rootDER).base64EncodedString()
        object["x5c"] = x5c
        let newHeader = Base64.encodeURL(try JSONSerialization.data(withJSONObject: object))
        jws = newHeader + "." + jws.split(separator: ".").dropFirst().joined(separator: ".")
        let result = try await sandboxVerifier().verify(Array(jws.utf8), now: testNow)
        expectInvalid(result, .chainUntrusted)
    }

    @Test func malformedJWSShapes() async throws {
        let verifier = try sandboxVerifier()
        for bad in ["eyJ.a", "eyJhbGciOiJFUzI1NiJ9..sig", "eyJ!!!.eyJ9.c2ln", "eyJhbGciOiJFUzI1NiJ9.bm90IGpzb24.c2ln"] {
            let result = await verifier.verify(Array(bad.utf8), now: testNow)
            #expect(
                result.error?.code == .malformed || result.error?.code == .unsupportedFormat, "\(bad): \(result.error.map { "\($0)" } ?? "valid")")
        }
    }

    @Test func refundNotificationVerifiesItsNestedTransaction() async throws {
        let jws = try sharedCA.mintNotification(type: "REFUND", transaction: spec, now: testNow)
        let result = try await sandboxVerifier().verify(Array(jws.utf8), now: testNow)
        guard case .valid(let evidence) = result, case .notification(let n) = evidence.signed else {
            Issue.record("\(result.error.map { "\($0)" } ?? "not a notification")")
            return
        }
        #expect(n.notificationType == "REFUND")
        #expect(n.transaction?.transactionId == "5000")
        #expect(n.transaction?.revocationDate != nil)
    }

    @Test func notificationWithForgedNestedTransactionIsRejected() async throws {
        // The outer notification is genuinely signed, but the nested JWS comes from another CA.
        let attacker = try SandboxCA.create(now: testNow)
        let inner = try attacker.mintTransaction(spec, now: testNow)
        let payload: [String: Any] = [
            "notificationType": "ONE_TIME_CHARGE", "signedDate": 1_795_305_600_000,
            "data": ["bundleId": "com.coffer.demo", "environment": "LocalTesting", "signedTransactionInfo": inner],
        ]
        let jws = try sharedCA.signJWS(payload: Array(JSONSerialization.data(withJSONObject: payload)))
        let result = try await sandboxVerifier().verify(Array(jws.utf8), now: testNow)
        expectInvalid(result, .chainUntrusted)
        #expect(result.error?.detail.hasPrefix("signedTransactionInfo") == true)
    }

    @Test func nestedEnvironmentMustMatchTheNotification() async throws {
        var sandboxSpec = spec
        sandboxSpec.environment = .sandbox
        let inner = try sharedCA.mintTransaction(sandboxSpec, now: testNow)
        let payload: [String: Any] = [
            "notificationType": "ONE_TIME_CHARGE", "signedDate": 1_795_305_600_000,
            "data": ["bundleId": "com.coffer.demo", "environment": "LocalTesting", "signedTransactionInfo": inner],
        ]
        let jws = try sharedCA.signJWS(payload: Array(JSONSerialization.data(withJSONObject: payload)))
        let wide = AppStoreVerifier(
            configuration: VerifierConfiguration(
                anchors: [try .custom(sharedCA.rootDER, environments: [.sandbox, .localTesting], requireAppleExtensions: true)],
                bundleIds: ["com.coffer.demo"]))
        expectInvalid(await wide.verify(Array(jws.utf8), now: testNow), .environmentMismatch)
    }

    @Test func nestedTransactionForAnotherAppIsRejected() async throws {
        var other = spec
        other.bundleId = "com.evil.clone"
        let inner = try sharedCA.mintTransaction(other, now: testNow)
        let payload: [String: Any] = [
            "notificationType": "ONE_TIME_CHARGE", "signedDate": 1_795_305_600_000,
            "data": ["bundleId": "com.coffer.demo", "environment": "LocalTesting", "signedTransactionInfo": inner],
        ]
        let jws = try sharedCA.signJWS(payload: Array(JSONSerialization.data(withJSONObject: payload)))
        expectInvalid(try await sandboxVerifier().verify(Array(jws.utf8), now: testNow), .bundleMismatch)
    }
}
