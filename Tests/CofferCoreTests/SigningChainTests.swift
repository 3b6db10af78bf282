import CofferCore
import CofferSandbox
import Foundation
import Testing

/// A CA certificate never signs data, and a JWS chain is exactly x5c: leaf → intermediate →
/// the configured root, three distinct certificates.
@Suite struct SigningChainTests {
    let spec = TransactionSpec(bundleId: "com.coffer.demo", productId: "level.pack.1", transactionId: "6000")

    func mint(_ chain: JWSEncoding.Chain, signer: JWSEncoding.Part = .leaf, ca: SandboxCA = sharedCA) throws -> [UInt8] {
        var encoding = JWSEncoding()
        encoding.chain = chain
        encoding.signer = signer
        return Array(try ca.mintTransaction(spec, now: testNow, encoding: encoding).utf8)
    }

    /// The verifiers a `--root` used to produce, and the ones it produces now.
    func verifiers(_ ca: SandboxCA = sharedCA) throws -> [AppStoreVerifier] {
        [
            try sandboxVerifier(ca),
            AppStoreVerifier(
                configuration: VerifierConfiguration(
                    anchors: try TrustAnchor.anchors(for: [ConfiguredRoot(scope: nil, der: ca.rootDER, name: "root.cer")], environments: []),
                    bundleIds: nil)),
            AppStoreVerifier(
                configuration: VerifierConfiguration(
                    anchors: [try .custom(ca.rootDER, environments: [.localTesting, .sandbox], requireAppleExtensions: false)], bundleIds: nil)),
        ]
    }

    @Test func theStandardChainVerifiesUnderEachVerifier() async throws {
        for verifier in try verifiers() {
            let result = await verifier.verify(try mint(.standard), now: testNow)
            #expect(result.isValid, "\(result.error.map { "\($0)" } ?? "")")
        }
    }

    @Test func jwsSignedByTheRootWithX5COfTheRootIsRefused() async throws {
        let forged = try mint(.parts([.root]), signer: .root)
        for verifier in try verifiers() {
            expectInvalid(await verifier.verify(forged, now: testNow), .chainUntrusted)
        }
    }

    @Test func jwsSignedByTheIntermediateWithATwoCertificateChainIsRefused() async throws {
        let forged = try mint(.parts([.intermediate, .root]), signer: .intermediate)
        for verifier in try verifiers() {
            expectInvalid(await verifier.verify(forged, now: testNow), .chainLengthInvalid)
        }
    }

    @Test(arguments: [
        [JWSEncoding.Part.root, .intermediate, .root],
        [.intermediate, .root, .root],
        [.intermediate, .intermediate, .root],
    ])
    func caSignersInThreeCertificateChainsAreRefused(parts: [JWSEncoding.Part]) async throws {
        let forged = try mint(.parts(parts), signer: parts[0])
        for verifier in try verifiers() {
            expectInvalid(await verifier.verify(forged, now: testNow), .chainUntrusted)
        }
    }

    /// Duplicates, a CA as leaf, the leaf again as root: all refused even though the
    /// leaf key signed.
    @Test(arguments: [
        [JWSEncoding.Part.leaf, .leaf, .root],
        [.leaf, .intermediate, .intermediate],
        [.leaf, .intermediate, .leaf],
        [.leaf, .root, .root],
        [.intermediate, .leaf, .root],
        [.leaf, .root, .intermediate],
    ])
    func x5cIsThreeDistinctCertificatesInOrder(parts: [JWSEncoding.Part]) async throws {
        let forged = try mint(.parts(parts))
        for verifier in try verifiers() {
            expectInvalid(await verifier.verify(forged, now: testNow), .chainUntrusted)
        }
    }

    @Test(arguments: [
        [JWSEncoding.Part.leaf], [.leaf, .intermediate], [.leaf, .root], [.leaf, .intermediate, .root, .root],
        [.leaf, .intermediate, .root, .intermediate], [],
    ])
    func x5cOfOtherLengthsIsRefused(parts: [JWSEncoding.Part]) async throws {
        let forged = try mint(.parts(parts))
        for verifier in try verifiers() {
            let code = await verifier.verify(forged, now: testNow).error?.code
            switch parts.count {
            case 0: #expect(code == .certificateChainMissing)
            case 1: #expect(code == .chainUntrusted, "one certificate: only a direct-signing anchor")
            default: #expect(code == .chainLengthInvalid)
            }
        }
    }

    @Test func x5c2MustBeTheConfiguredRoot() async throws {
        // A genuine leaf and intermediate, signed by the leaf, but x5c[2] is another CA's root
        // (or the leaf again): refused, although the configured root validates the first two.
        let other = try SandboxCA.create(now: testNow)
        for third in [JWSEncoding.Part.der(other.rootDER), .der(try SandboxCA.derBytes(of: other.intermediate))] {
            let forged = try mint(.parts([.leaf, .intermediate, third]))
            for verifier in try verifiers() {
                let result = await verifier.verify(forged, now: testNow)
                expectInvalid(result, .chainUntrusted)
                #expect(result.error?.detail.contains("x5c[2]") == true, "\(result.error.map { "\($0)" } ?? "")")
            }
        }
    }

    @Test func noPathIsBuiltAroundTheCarriedIntermediate() async throws {
        // The leaf is issued by the root itself; x5c still lists the intermediate. A path
        // builder finds leaf → root and would accept it under an anchor without Apple's
        // three-certificate rule.
        var options = SandboxCA.Options()
        options.jwsLeafIssuedByRoot = true
        options.seed = 0x5EED_0001
        let ca = try SandboxCA.create(now: testNow, options: options)
        for verifier in try verifiers(ca) {
            expectInvalid(await verifier.verify(try mint(.standard, ca: ca), now: testNow), .chainUntrusted)
        }
    }

    @Test func leavesClaimingToBeCAsNeverSign() async throws {
        var options = SandboxCA.Options()
        options.leavesAreCAs = true
        options.seed = 0x5EED_0002
        let ca = try SandboxCA.create(now: testNow, options: options)
        for verifier in try verifiers(ca) {
            expectInvalid(await verifier.verify(try mint(.standard, ca: ca), now: testNow), .chainUntrusted)
            expectInvalid(await verifier.verify(try ca.mintReceipt(demoReceipt(), now: testNow), now: testNow), .chainUntrusted)
        }
    }

    @Test func realXcodeCertificatesStillSignDirectly() async throws {
        // Both Xcode certificates are self-signed with cA=TRUE, but their key usage includes
        // digitalSignature and they are configured as direct signers for Xcode data only.
        let receipts = AppStoreVerifier(
            configuration: VerifierConfiguration(
                anchors: [try .xcode(try Fixtures.bytes("certs/StoreKitTestCertificate_xcode_receipts.cer"))], bundleIds: nil))
        for file in ["xcode/X02_apple_xcode_app_receipt_with_transaction_2023.der", "xcode/X05_kvitto_xcode_storekit_test_eehelper_2020.der"] {
            #expect(await receipts.verify(try Fixtures.bytes(file), now: testNow).isValid)
        }
        let jws = AppStoreVerifier(
            configuration: VerifierConfiguration(
                anchors: [try .xcode(try Fixtures.bytes("certs/xcode_jws_StoreKitTestingInXcode.cer"))], bundleIds: nil))
        #expect(await jws.verify(Array(try Fixtures.text("jws/JX2_xcode_signed_transaction_2023.jws").utf8), now: testNow).isValid)
        // The same certificate inside a chain (as a leaf) is a CA and refused.
        expectInvalid(await receipts.verify(try sharedCA.mintReceipt(demoReceipt(), now: testNow), now: testNow), .chainUntrusted)
    }

    @Test func realAppleChainsAreExactlyX5C() async throws {
        // Apple's x5c[2] is byte for byte Apple Root CA - G3; the library test vectors' x5c[2]
        // is a re-issue of their root (same subject and key, other bytes) and stays accepted.
        let verifier = try appleVerifier()
        for file in RealJWSTests.appleJWS {
            let result = await verifier.verify(Array(try Fixtures.text(file).utf8), now: testNow)
            #expect(result.isValid, "\(file): \(result.error.map { "\($0)" } ?? "")")
            #expect(result.evidence.signing?.chain.count == 3)
        }
    }
}
