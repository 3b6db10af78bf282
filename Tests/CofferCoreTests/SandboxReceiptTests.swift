import CofferCore
import CofferSandbox
import Foundation
import Testing

/// Receipts minted by Coffer's sandbox CA, valid and deliberately broken.
@Suite struct SandboxReceiptTests {
    func mint(_ spec: ReceiptSpec = demoReceipt(), encoding: ReceiptEncoding = .init(), ca: SandboxCA = sharedCA) throws -> [UInt8] {
        try ca.mintReceipt(spec, now: testNow, encoding: encoding)
    }

    @Test(arguments: [(false, DigestAlgorithm.sha256), (true, .sha1), (true, .sha256), (false, .sha1), (false, .sha512)])
    func validInDERAndBERWithEachDigest(ber: Bool, digest: DigestAlgorithm) async throws {
        var encoding = ReceiptEncoding()
        encoding.ber = ber
        encoding.digest = digest
        var spec = demoReceipt()
        // Big enough that BER output splits the content into several chunks.
        spec.purchases += (0..<40).map { PurchaseSpec(productId: "level.pack.\($0)", transactionId: "\(2000 + $0)") }
        let result = try await sandboxVerifier().verify(try mint(spec, encoding: encoding), now: testNow)
        guard case .valid(let evidence) = result else { Issue.record("\(result.error.map { "\($0)" } ?? "")"); return }
        #expect(evidence.isBER == ber)
        #expect(evidence.environment == .localTesting)
        #expect(evidence.signing?.digest == digest.rawValue)
        #expect(evidence.signing?.chain == ["Coffer Sandbox Receipt Signing", "Coffer Sandbox Developer Relations CA", "Coffer Sandbox Root CA"])
        #expect(evidence.receipt?.inApp.count == 41)
        #expect(evidence.receipt?.inApp.first?.transactionId == "1000")
        #expect(evidence.receipt?.inApp.first?.productId == "level.pack.1")
        #expect(evidence.receipt?.inApp.first?.cancellationDate == nil, "empty string means absent")
    }

    @Test func signedAttributesAreVerified() async throws {
        var encoding = ReceiptEncoding()
        encoding.signedAttributes = true
        #expect(try await sandboxVerifier().verify(try mint(encoding: encoding), now: testNow).isValid)
        encoding.corruptMessageDigest = true
        expectInvalid(try await sandboxVerifier().verify(try mint(encoding: encoding), now: testNow), .signatureInvalid)
    }

    @Test func wrongRootIsUntrusted() async throws {
        let other = try SandboxCA.create(now: testNow)
        expectInvalid(try await sandboxVerifier(other).verify(try mint(), now: testNow), .chainUntrusted)
    }

    @Test func appleRootsNeverTrustSandboxReceipts() async throws {
        expectInvalid(try await appleVerifier().verify(try mint(), now: testNow), .chainUntrusted)
    }

    @Test func signerNamedAsTheIntermediateIsRejected() async throws {
        var encoding = ReceiptEncoding()
        encoding.signerIsIntermediate = true
        expectInvalid(try await sandboxVerifier().verify(try mint(encoding: encoding), now: testNow), .chainUntrusted)
    }

    @Test func missingLeafOIDIsRejected() async throws {
        var options = SandboxCA.Options()
        options.leafAppleExtension = false
        let ca = try SandboxCA.create(now: testNow, options: options)
        expectInvalid(try await sandboxVerifier(ca).verify(try mint(ca: ca), now: testNow), .missingAppleExtension)
    }

    @Test func missingIntermediateOIDIsRejected() async throws {
        var options = SandboxCA.Options()
        options.intermediateAppleExtension = false
        let ca = try SandboxCA.create(now: testNow, options: options)
        expectInvalid(try await sandboxVerifier(ca).verify(try mint(ca: ca), now: testNow), .missingAppleExtension)
    }

    @Test func expiredChainIsRejectedAndTheCacheHonoursValidity() async throws {
        var options = SandboxCA.Options()
        options.validFrom = testNow.addingTimeInterval(-10 * 86400)
        options.validFor = 5 * 86400
        let ca = try SandboxCA.create(now: testNow, options: options)
        let verifier = try sandboxVerifier(ca)
        var spec = demoReceipt()
        spec.creationDate = testNow.addingTimeInterval(-8 * 86400)
        let receipt = try ca.mintReceipt(spec, now: testNow)
        // Valid at its creation date (and now cached) …
        #expect(await verifier.verify(receipt, now: testNow).isValid)
        // … but a cached chain is not reused outside its validity window.
        expectInvalid(await verifier.verify(receipt, now: testNow, validateAt: testNow), .certificateExpired)
        spec.creationDate = testNow
        expectInvalid(await verifier.verify(try ca.mintReceipt(spec, now: testNow), now: testNow), .certificateExpired)
    }

    @Test func wrongBundleIsRejected() async throws {
        var spec = demoReceipt()
        spec.bundleId = "com.evil.clone"
        expectInvalid(try await sandboxVerifier().verify(try mint(spec), now: testNow), .bundleMismatch)
    }

    @Test func claimedEnvironmentMustBeOneTheRootVouchesFor() async throws {
        for environment in [Environment.production, .sandbox, .xcode] {
            var spec = demoReceipt()
            spec.environment = environment
            expectInvalid(try await sandboxVerifier().verify(try mint(spec), now: testNow), .environmentNotAllowed)
        }
    }

    @Test func deviceCheck() async throws {
        var spec = demoReceipt()
        let device: [UInt8] = Array(0..<16)
        spec.deviceIdentifier = device
        let receipt = try mint(spec)
        let verifier = try sandboxVerifier()
        #expect(await verifier.verify(receipt, now: testNow, deviceIdentifier: device).isValid)
        expectInvalid(await verifier.verify(receipt, now: testNow, deviceIdentifier: Array(repeating: 7, count: 16)), .deviceMismatch)
    }

    /// Finds `needle` in `haystack`.
    func offset(of needle: [UInt8], in haystack: [UInt8]) throws -> Int {
        try #require((0...(haystack.count - needle.count)).first { haystack[$0..<($0 + needle.count)].elementsEqual(needle) })
    }

    @Test func tamperedContentByteBreaksTheSignature() async throws {
        var receipt = try mint()
        receipt[try offset(of: Array("level.pack.1".utf8), in: receipt) + 6] ^= 0x01  // "level/pack.1"
        let result = try await sandboxVerifier().verify(receipt, now: testNow)
        expectInvalid(result, .signatureInvalid)
    }

    @Test func tamperedSignatureByteIsRejected() async throws {
        var receipt = try mint()
        receipt[receipt.count - 10] ^= 0x40  // inside the RSA signature, the last field
        expectInvalid(try await sandboxVerifier().verify(receipt, now: testNow), .signatureInvalid)
    }

    @Test func tamperedCertificateByteIsRejected() async throws {
        var receipt = try mint()
        receipt[try offset(of: Array("Receipt Signing".utf8), in: receipt)] ^= 0x20  // "receipt Signing"
        expectInvalid(try await sandboxVerifier().verify(receipt, now: testNow), .chainUntrusted)
    }

    @Test func truncationsAreMalformedNeverACrash() async throws {
        let receipt = try mint()
        let verifier = try sandboxVerifier()
        for length in stride(from: 0, to: receipt.count, by: 7) {
            let result = await verifier.verifyReceipt(Array(receipt.prefix(length)), now: testNow)
            #expect(result.error?.code == .malformed, "length \(length): \(result.error.map { "\($0)" } ?? "valid")")
        }
    }

    @Test func tooDeeplyNestedBERIsRejected() async throws {
        // 40 nested indefinite-length SEQUENCEs.
        let deep = Array(repeating: [UInt8]([0x30, 0x80]), count: 40).flatMap { $0 } + Array(repeating: 0, count: 80)
        expectInvalid(try await sandboxVerifier().verifyReceipt(deep, now: testNow), .limitExceeded)
        let deepDER = (0..<40).reduce([UInt8]([0x05, 0x00])) { inner, _ in [0x30, UInt8(inner.count)] + inner }
        expectInvalid(try await sandboxVerifier().verifyReceipt(deepDER, now: testNow), .limitExceeded)
    }

    @Test func oversizedInputIsRejected() async throws {
        var limits = VerificationLimits()
        limits.maxInputBytes = 1000
        let verifier = AppStoreVerifier(configuration: VerifierConfiguration(anchors: [try sharedCA.anchor()], bundleIds: nil, limits: limits))
        expectInvalid(await verifier.verify(try mint(), now: testNow), .limitExceeded)
    }

    /// A certificate is parsed whole before any signature is checked: one of over 16 KiB (a
    /// SEQUENCE holding one OCTET STRING, 20,004 bytes in all) is refused by its size, and a
    /// receipt carrying more than Apple's three and two spares by its count.
    @Test func oversizedCertificatesAndTooManyAreRejected() async throws {
        var encoding = ReceiptEncoding()
        encoding.extraCertificates = [[0x30, 0x82, 0x4E, 0x20, 0x04, 0x82, 0x4E, 0x1C] + Array(repeating: 0x05, count: 19_996)]
        let big = try await sandboxVerifier().verify(try mint(encoding: encoding), now: testNow)
        #expect(big.error?.code == .limitExceeded, "\(big.error.map { "\($0)" } ?? "valid")")
        #expect(big.error?.detail.contains("20004 bytes") == true, "\(big.error.map { "\($0)" } ?? "valid")")
        // Under the size limit, the same element is looked at and refused for what it is.
        encoding.extraCertificates = [[0x30, 0x82, 0x3E, 0x80, 0x04, 0x82, 0x3E, 0x7C] + Array(repeating: 0x05, count: 15_996)]
        let small = try await sandboxVerifier().verify(try mint(encoding: encoding), now: testNow)
        #expect(small.error?.code == .malformed, "\(small.error.map { "\($0)" } ?? "valid")")
        encoding.extraCertificates = Array(repeating: [0x30, 0x00], count: 3)
        let many = try await sandboxVerifier().verify(try mint(encoding: encoding), now: testNow)
        #expect(many.error?.code == .limitExceeded, "\(many.error.map { "\($0)" } ?? "valid")")
    }

    @Test func tooManyInAppRecordsIsRejected() async throws {
        var limits = VerificationLimits()
        limits.maxInAppRecords = 3
        let verifier = AppStoreVerifier(configuration: VerifierConfiguration(anchors: [try sharedCA.anchor()], bundleIds: nil, limits: limits))
        var spec = demoReceipt()
        spec.purchases += (0..<3).map { PurchaseSpec(productId: "p", transactionId: "\($0)") }
        expectInvalid(await verifier.verify(try mint(spec), now: testNow), .limitExceeded)
    }

    @Test func garbageIsUnsupportedOrMalformed() async throws {
        let verifier = try sandboxVerifier()
        expectInvalid(await verifier.verify(Array("hello world".utf8), now: testNow), .unsupportedFormat)
        expectInvalid(await verifier.verify([0xFF, 0x00, 0x13], now: testNow), .unsupportedFormat)
        expectInvalid(await verifier.verify([0x30, 0x03, 0x02, 0x01, 0x01], now: testNow), .malformed)
        expectInvalid(await verifier.verify([], now: testNow), .unsupportedFormat)
    }
}
