import CofferCore
import CofferSandbox
import Foundation
import Testing

/// Which roots vouch for which environments: the `--root` / `--environment` rules
/// (`TrustAnchor.anchors(for:environments:)`, used by `serve`, `receipt inspect` and `bench`).
@Suite struct TrustPolicyTests {
    static let storeKitReceipts = "certs/StoreKitTestCertificate_xcode_receipts.cer"

    func verifier(_ roots: [ConfiguredRoot], _ environments: Set<Environment> = []) throws -> AppStoreVerifier {
        AppStoreVerifier(
            configuration: VerifierConfiguration(anchors: try TrustAnchor.anchors(for: roots, environments: environments), bundleIds: nil))
    }

    func sandboxRoot(_ scope: Environment? = nil, ca: SandboxCA = sharedCA) -> ConfiguredRoot {
        ConfiguredRoot(scope: scope, der: ca.rootDER, name: "root.cer")
    }

    func transaction(_ environment: Environment, ca: SandboxCA = sharedCA, encoding: JWSEncoding = .init()) throws -> [UInt8] {
        var spec = TransactionSpec(bundleId: "com.coffer.demo", productId: "level.pack.1", transactionId: "7000")
        spec.environment = environment
        return Array(try ca.mintTransaction(spec, now: testNow, encoding: encoding).utf8)
    }

    @Test func builtInAppleRootsVouchForProductionOnlyByDefault() async throws {
        let anchors = try TrustAnchor.anchors(for: [], environments: [])
        #expect(anchors.count == 2)
        #expect(anchors.allSatisfy { $0.kind == .apple && $0.environments == [.production] })
        let verifier = try verifier([])
        #expect(await verifier.verify(try Fixtures.bytes("legacy/L01_tp_production_getpure_2024.der"), now: testNow).isValid)
        for file in ["legacy/L11_rc_sandbox_revenuecat_sample1_2020.der", "legacy/L03_tp_sandbox_nutcall_187iap_2020.der"] {
            expectInvalid(await verifier.verify(try Fixtures.bytes(file), now: testNow), .environmentNotAllowed)
        }
        for file in RealJWSTests.appleJWS {
            expectInvalid(await verifier.verify(Array(try Fixtures.text(file).utf8), now: testNow), .environmentNotAllowed)
        }
    }

    @Test func sandboxMustBeNamedAndThenIsExactlyWhatIsNamed() async throws {
        let l01 = try Fixtures.bytes("legacy/L01_tp_production_getpure_2024.der")
        let l11 = try Fixtures.bytes("legacy/L11_rc_sandbox_revenuecat_sample1_2020.der")
        let sandboxOnly = try verifier([], [.sandbox])
        #expect(await sandboxOnly.verify(l11, now: testNow).isValid)
        expectInvalid(await sandboxOnly.verify(l01, now: testNow), .environmentNotAllowed)
        let both = try verifier([], [.production, .sandbox])
        #expect(await both.verify(l11, now: testNow).isValid)
        #expect(await both.verify(l01, now: testNow).isValid)
        #expect(try TrustAnchor.anchors(for: [], environments: [.sandbox, .production]).allSatisfy { $0.environments == [.production, .sandbox] })
    }

    @Test func nonAppleRootVouchesForLocalTestingOnlyUnlessScoped() async throws {
        let unscoped = try TrustAnchor.anchors(for: [sandboxRoot()], environments: [])
        #expect(unscoped.map(\.environments) == [[.localTesting]])
        #expect(unscoped.first?.signsDirectly == false)
        let verifier = try verifier([sandboxRoot()])
        #expect(await verifier.verify(try transaction(.localTesting), now: testNow).isValid)
        for environment in [Environment.sandbox, .xcode, .production] {
            expectInvalid(await verifier.verify(try transaction(environment), now: testNow), .environmentNotAllowed)
        }
        // Scoped: that environment only.
        let scoped = try self.verifier([sandboxRoot(.sandbox)])
        #expect(await scoped.verify(try transaction(.sandbox), now: testNow).isValid)
        expectInvalid(await scoped.verify(try transaction(.localTesting), now: testNow), .environmentNotAllowed)
        // The same certificate scoped twice vouches for both.
        let twice = try TrustAnchor.anchors(for: [sandboxRoot(.sandbox), sandboxRoot(.localTesting)], environments: [])
        #expect(twice.map(\.environments) == [[.sandbox, .localTesting]])
        // --environment filters, it never stretches an unscoped root.
        #expect(throws: TrustAnchor.ConfigurationError.self) { try TrustAnchor.anchors(for: [sandboxRoot()], environments: [.sandbox]) }
        #expect(try TrustAnchor.anchors(for: [sandboxRoot(.sandbox)], environments: [.sandbox]).map(\.environments) == [[.sandbox]])
        // A root left vouching for nothing accepted is a configuration error, not silently dropped.
        #expect(throws: TrustAnchor.ConfigurationError.self) {
            try TrustAnchor.anchors(for: [sandboxRoot(.sandbox), sandboxRoot(.localTesting)], environments: [.sandbox])
        }
    }

    @Test func productionIsNeverVouchedForByANonAppleRoot() throws {
        #expect(throws: TrustAnchor.ConfigurationError.self) { try TrustAnchor.anchors(for: [sandboxRoot(.production)], environments: []) }
        #expect(throws: TrustAnchor.ConfigurationError.self) { try TrustAnchor.anchors(for: [sandboxRoot()], environments: [.production]) }
        #expect(throws: TrustAnchor.ConfigurationError.self) {
            try TrustAnchor.anchors(for: [sandboxRoot(.localTesting)], environments: [.production, .localTesting])
        }
    }

    @Test func appleRootsVouchOnlyForProductionAndSandbox() throws {
        let apple = ConfiguredRoot(scope: nil, der: AppleRoots.appleRootCA, name: "apple.cer")
        #expect(try TrustAnchor.anchors(for: [apple], environments: []).map(\.environments) == [[.production]])
        var scoped = apple
        scoped.scope = .sandbox
        #expect(try TrustAnchor.anchors(for: [scoped], environments: []).map(\.environments) == [[.sandbox]])
        for environment in [Environment.xcode, .localTesting] {
            scoped.scope = environment
            #expect(throws: TrustAnchor.ConfigurationError.self) { try TrustAnchor.anchors(for: [scoped], environments: []) }
        }
        #expect(throws: TrustAnchor.ConfigurationError.self) { try TrustAnchor.anchors(for: [], environments: [.xcode]) }
        #expect(throws: TrustAnchor.ConfigurationError.self) { try TrustAnchor.apple(AppleRoots.appleRootCAG3, environments: [.xcode]) }
        #expect(try TrustAnchor.apple(AppleRoots.appleRootCAG3, environments: [.sandbox]).environments == [.sandbox])
    }

    @Test func xcodeStoreKitCertificateScopedToXcodeSignsDirectly() async throws {
        let storeKit = ConfiguredRoot(scope: .xcode, der: try Fixtures.bytes(Self.storeKitReceipts), name: "StoreKit.cer")
        let anchors = try TrustAnchor.anchors(for: [storeKit], environments: [])
        #expect(anchors.count == 1)
        #expect(anchors.first?.signsDirectly == true)
        #expect(anchors.first?.environments == [.xcode])
        let verifier = try verifier([storeKit])
        for file in ["xcode/X02_apple_xcode_app_receipt_with_transaction_2023.der", "xcode/X05_kvitto_xcode_storekit_test_eehelper_2020.der"] {
            let result = await verifier.verify(try Fixtures.bytes(file), now: testNow)
            #expect(result.isValid, "\(file): \(result.error.map { "\($0)" } ?? "")")
        }
        // Unscoped it is a LocalTesting root that does not sign directly: Xcode data is refused.
        var unscoped = storeKit
        unscoped.scope = nil
        let plain = try self.verifier([unscoped])
        expectInvalid(
            await plain.verify(try Fixtures.bytes("xcode/X02_apple_xcode_app_receipt_with_transaction_2023.der"), now: testNow), .chainUntrusted)
        // A direct signer vouches for Xcode only.
        var sandbox = storeKit
        sandbox.scope = .sandbox
        #expect(throws: TrustAnchor.ConfigurationError.self) { try TrustAnchor.anchors(for: [storeKit, sandbox], environments: []) }
    }

    @Test func aCARootNeverSignsDirectly() async throws {
        // The sandbox root's key usage is keyCertSign + cRLSign: scoped to Xcode it is a chain root.
        let anchors = try TrustAnchor.anchors(for: [sandboxRoot(.xcode)], environments: [])
        #expect(anchors.first?.signsDirectly == false)
        var encoding = JWSEncoding()
        encoding.chain = .parts([.root])
        encoding.signer = .root
        expectInvalid(await (try verifier([sandboxRoot(.xcode)])).verify(try transaction(.xcode, encoding: encoding), now: testNow), .chainUntrusted)
        // …and cannot be configured to sign directly, for any environment.
        for environments: Set<Environment> in [[.xcode], [.localTesting], [.sandbox, .xcode, .localTesting]] {
            #expect(throws: TrustAnchor.ConfigurationError.self) {
                try TrustAnchor.custom(sharedCA.rootDER, environments: environments, requireAppleExtensions: true, signsDirectly: true)
            }
        }
        #expect(throws: TrustAnchor.ConfigurationError.self) { try TrustAnchor.xcode(sharedCA.rootDER) }
        // Xcode's JWS certificate may sign directly, but for Xcode data only.
        let xcodeJWS = try Fixtures.bytes("certs/xcode_jws_StoreKitTestingInXcode.cer")
        #expect(try TrustAnchor.custom(xcodeJWS, environments: [.xcode], requireAppleExtensions: false, signsDirectly: true).signsDirectly)
        #expect(throws: TrustAnchor.ConfigurationError.self) {
            try TrustAnchor.custom(xcodeJWS, environments: [.xcode, .sandbox], requireAppleExtensions: false, signsDirectly: true)
        }
    }

    @Test(arguments: [
        ("Sandbox=/etc/ca.pem", Environment.sandbox, "/etc/ca.pem"),
        ("sandbox=/etc/ca.pem", .sandbox, "/etc/ca.pem"),
        ("XCODE=StoreKit.cer", .xcode, "StoreKit.cer"),
        ("LocalTesting=a=b.pem", .localTesting, "a=b.pem"),
        ("Production=apple.cer", .production, "apple.cer"),
        ("Sandbox=", .sandbox, ""),
    ])
    func scopedRootArgumentsParse(argument: String, scope: Environment, path: String) {
        let parsed = ConfiguredRoot.parse(argument)
        #expect(parsed.scope == scope)
        #expect(parsed.path == path)
    }

    @Test(arguments: ["/etc/coffer/root.pem", "/tmp/a=b.pem", "./Sandbox=x.pem", "Prod=x.pem", "=x.pem", "ProductionSandbox=x.pem", "root.cer"])
    func unscopedRootArgumentsAreWholePaths(argument: String) {
        let parsed = ConfiguredRoot.parse(argument)
        #expect(parsed.scope == nil)
        #expect(parsed.path == argument)
    }
}
