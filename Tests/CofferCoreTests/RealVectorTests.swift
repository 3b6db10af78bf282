import CofferCore
import Foundation
import Testing

/// Genuine Apple / Xcode / library-test vectors from ../shared/vectors (see Fixtures/PROVENANCE.md).
@Suite struct RealLegacyReceiptTests {
    static let appleLegacy = [
        "legacy/L01_tp_production_getpure_2024.der",
        "legacy/L03_tp_sandbox_nutcall_187iap_2020.der",
        "legacy/L08_kvitto_sandbox_emmiview_6iap_2015.der",
        "legacy/L11_rc_sandbox_revenuecat_sample1_2020.der",
    ]

    static func entry(_ file: String) throws -> [String: Any] {
        try #require(try Fixtures.entries("legacy_receipts").first { $0["file"] as? String == file })
    }

    @Test(arguments: appleLegacy)
    func validAtCreationDateWithExpectedValues(file: String) async throws {
        let e = try Self.entry(file)
        let bundle = try #require(e["bundle_id"] as? String)
        let verifier = try appleVerifier(bundleIds: [bundle])
        let result = await verifier.verify(try Fixtures.bytes(file), now: testNow)
        guard case .valid(let evidence) = result else {
            Issue.record("\(file): \(result.error.map { "\($0)" } ?? "")")
            return
        }
        let receipt = try #require(evidence.receipt)
        try checkReceipt(receipt, against: e)
        #expect(evidence.kind == .appReceipt)
        #expect(evidence.environment == Environment(claim: e["receipt_type"] as? String ?? ""))
        let signing = try #require(evidence.signing)
        #expect(signing.chain.count == 3)
        #expect(signing.chain.last == "Apple Root CA")
        #expect(signing.validatedAt == receipt.creationDate)
        let digest = e["digest"] as? String == "1.3.14.3.2.26" ? "sha1" : "sha256"
        #expect(signing.digest == digest)
    }

    @Test(arguments: appleLegacy)
    func invalidNowBecauseEveryChainHasExpired(file: String) async throws {
        // L03's source asserts this explicitly ("validationTime=now MUST FAIL"); all four
        // leaves expired before 2026 (latest: L01's, 2024-10-01).
        let result = try await appleVerifier().verify(try Fixtures.bytes(file), now: testNow, validateAt: testNow)
        expectInvalid(result, .certificateExpired)
        #expect(result.evidence.receipt?.bundleId != nil, "decoding still reports what it read")
    }

    @Test func base64WithLineBreaksIsAccepted() async throws {
        let der = try Fixtures.bytes("legacy/L11_rc_sandbox_revenuecat_sample1_2020.der")
        let wrapped = Data(der).base64EncodedString(options: [.lineLength64Characters, .endLineWithCarriageReturn, .endLineWithLineFeed])
        let result = try await appleVerifier().verify(Array(wrapped.utf8), now: testNow)
        #expect(result.isValid)
        #expect(result.evidence.receipt?.inApp.count == 9)
    }

    @Test func wrongBundleIsRejected() async throws {
        let result = try await appleVerifier(bundleIds: ["com.other.app"]).verify(try Fixtures.bytes(Self.appleLegacy[0]), now: testNow)
        expectInvalid(result, .bundleMismatch)
    }

    @Test func productionOnlyConfigurationRejectsSandboxReceipts() async throws {
        let verifier = try appleVerifier(allowSandbox: false)
        expectInvalid(
            await verifier.verify(try Fixtures.bytes("legacy/L11_rc_sandbox_revenuecat_sample1_2020.der"), now: testNow), .environmentNotAllowed)
        #expect(await verifier.verify(try Fixtures.bytes("legacy/L01_tp_production_getpure_2024.der"), now: testNow).isValid)
    }

    @Test func noConfiguredRootFailsClosed() async throws {
        let verifier = AppStoreVerifier(configuration: VerifierConfiguration(anchors: [], bundleIds: nil))
        expectInvalid(await verifier.verify(try Fixtures.bytes(Self.appleLegacy[0]), now: testNow), .chainUntrusted)
    }

    @Test func wrongAppleRootFailsClosed() async throws {
        // The G3 root is genuine Apple, but legacy receipts chain to Apple Root CA.
        let verifier = AppStoreVerifier(
            configuration: VerifierConfiguration(
                anchors: [try .apple(AppleRoots.appleRootCAG3, allowSandbox: true)], bundleIds: nil))
        expectInvalid(await verifier.verify(try Fixtures.bytes(Self.appleLegacy[0]), now: testNow), .chainUntrusted)
    }

    @Test(arguments: ["xcode/X02_apple_xcode_app_receipt_with_transaction_2023.der", "xcode/X05_kvitto_xcode_storekit_test_eehelper_2020.der"])
    func xcodeReceiptsValidOnlyUnderXcodePolicy(file: String) async throws {
        let e = try Self.entry(file)
        let xcode = AppStoreVerifier(
            configuration: VerifierConfiguration(
                anchors: [try .xcode(try Fixtures.bytes("certs/StoreKitTestCertificate_xcode_receipts.cer"))], bundleIds: nil))
        let result = await xcode.verify(try Fixtures.bytes(file), now: testNow)
        guard case .valid(let evidence) = result else {
            Issue.record("\(file): \(result.error.map { "\($0)" } ?? "")")
            return
        }
        #expect(evidence.environment == .xcode)
        #expect(evidence.isBER)
        #expect(evidence.signing?.chain == ["StoreKit"])
        try checkReceipt(try #require(evidence.receipt), against: e)

        let production = try appleVerifier(allowSandbox: true)
        expectInvalid(await production.verify(try Fixtures.bytes(file), now: testNow), .chainUntrusted)
    }

    @Test func xcodeAnchorCannotBeAnAppleRootAndCannotVouchForProduction() throws {
        #expect(throws: TrustAnchor.ConfigurationError.self) { try TrustAnchor.xcode(AppleRoots.appleRootCA) }
        let storeKit = try Fixtures.bytes("certs/StoreKitTestCertificate_xcode_receipts.cer")
        #expect(throws: TrustAnchor.ConfigurationError.self) {
            try TrustAnchor.custom(storeKit, environments: [.production], requireAppleExtensions: false)
        }
        #expect(throws: TrustAnchor.ConfigurationError.self) { try TrustAnchor.apple(storeKit, allowSandbox: true) }
        #expect(try TrustAnchor.xcode(storeKit).environments == [.xcode])
    }

    @Test func oldTransactionReceiptPlistIsUnsupported() async throws {
        let result = try await appleVerifier().verify(
            try Fixtures.bytes("negative/N01_rc_unsupportedReceipt1_old_transaction_receipt.bin"), now: testNow)
        expectInvalid(result, .unsupportedFormat)
    }

    @Test func embeddedAppleRootsMatchTheVectorsAndPublishedFingerprints() throws {
        #expect(AppleRoots.appleRootCA == (try Fixtures.bytes("certs/AppleIncRootCertificate.cer")))
        #expect(AppleRoots.appleRootCAG3 == (try Fixtures.bytes("certs/AppleRootCA-G3.cer")))
        #expect(AppleRoots.isAppleRoot(AppleRoots.appleRootCA))
        #expect(!AppleRoots.isAppleRoot(try Fixtures.bytes("certs/apple_swiftlib_testCA.cer")))
    }

    func checkReceipt(_ receipt: AppReceipt, against e: [String: Any]) throws {
        #expect(receipt.receiptType == e["receipt_type"] as? String)
        #expect(receipt.bundleId == e["bundle_id"] as? String)
        #expect(receipt.appVersion == e["app_version"] as? String)
        #expect(receipt.originalAppVersion == e["original_app_version"] as? String)
        #expect(receipt.opaque?.hexString == e["opaque_hex"] as? String)
        #expect(receipt.sha1Hash?.hexString == e["sha1_hash_hex"] as? String)
        #expect(receipt.creationDate == (try date(try #require(e["creation_date"] as? String))))
        if let expiration = e["expiration_date"] as? String {
            #expect(receipt.expirationDate == (try date(expiration)))
        } else {
            #expect(receipt.expirationDate == nil)
        }
        let inApp = try #require(e["in_app"] as? [[String: Any]])
        try #require(receipt.inApp.count == inApp.count)
        for (record, want) in zip(receipt.inApp, inApp) {
            #expect(record.productId == want["product_id"] as? String)
            #expect(record.transactionId == want["transaction_id"] as? String)
            #expect(record.originalTransactionId == want["original_transaction_id"] as? String)
            #expect(record.quantity == (want["quantity"] as? Int).map(Int64.init))
            #expect(record.webOrderLineItemId == (want["web_order_line_item_id"] as? Int).map(Int64.init))
            for (value, key) in [
                (record.purchaseDate, "purchase_date"), (record.originalPurchaseDate, "original_purchase_date"),
                (record.expiresDate, "expires_date"), (record.cancellationDate, "cancellation_date"),
            ] {
                let text = want[key] as? String ?? ""
                #expect(value == (text.isEmpty ? nil : try date(text)), "\(key)")
            }
        }
    }
}

@Suite struct RealJWSTests {
    static let appleJWS = [
        "jws/J02_real_sandbox_transaction_consumable_goodheart_2025_mingos.jws",
        "jws/J10_real_sandbox_notification_DID_RENEW_1759302518835_session.jws",
        "jws/J10a_real_sandbox_txn_nested_in_J10_session.jws",
        "jws/J10b_real_sandbox_renewal_nested_in_J10_session.jws",
        "jws/J23_real_sandbox_notification_REFUND_1760592122788_session.jws",
        "jws/J23a_real_sandbox_txn_nested_in_J23_session.jws",
        "jws/J23b_real_sandbox_renewal_nested_in_J23_session.jws",
    ]

    static func entry(_ file: String) throws -> [String: Any] {
        try #require(try Fixtures.entries("jws").first { $0["file"] as? String == file })
    }

    @Test(arguments: appleJWS)
    func validAtSignedDateWithExpectedPayload(file: String) async throws {
        let e = try Self.entry(file)
        let payload = try #require(e["payload"] as? [String: Any])
        let result = try await appleVerifier().verify(Array(try Fixtures.text(file).utf8), now: testNow)
        guard case .valid(let evidence) = result else {
            Issue.record("\(file): \(result.error.map { "\($0)" } ?? "")")
            return
        }
        #expect(evidence.environment == .sandbox)
        #expect(evidence.signing?.chain.last == "Apple Root CA - G3")
        #expect(evidence.signing?.chain.count == 3)
        let signed = try #require(evidence.signed)
        let signedDate = (payload["signedDate"] as? NSNumber)?.doubleValue
        #expect(evidence.signing?.validatedAt.timeIntervalSince1970 == signedDate.map { $0 / 1000 })
        switch signed {
        case .transaction(let t):
            #expect(t.transactionId == payload["transactionId"] as? String)
            #expect(t.originalTransactionId == payload["originalTransactionId"] as? String)
            #expect(t.productId == payload["productId"] as? String)
            #expect(t.bundleId == payload["bundleId"] as? String)
            #expect(t.type == payload["type"] as? String)
            #expect(t.purchaseDate?.date.timeIntervalSince1970 == (payload["purchaseDate"] as? NSNumber).map { $0.doubleValue / 1000 })
            #expect(t.revocationDate?.date.timeIntervalSince1970 == (payload["revocationDate"] as? NSNumber).map { $0.doubleValue / 1000 })
        case .renewalInfo(let r):
            #expect(r.originalTransactionId == payload["originalTransactionId"] as? String)
            #expect(r.autoRenewProductId == payload["autoRenewProductId"] as? String)
        case .notification(let n):
            #expect(n.notificationType == payload["notificationType"] as? String)
            let data = try #require(payload["data"] as? [String: Any])
            #expect(n.data?.bundleId == data["bundleId"] as? String)
            // Both nested JWS were verified and decoded.
            #expect(n.transaction?.bundleId == data["bundleId"] as? String)
            #expect(n.renewalInfo?.originalTransactionId != nil)
            if n.notificationType == "REFUND" { #expect(n.transaction?.revocationDate != nil) }
        case .appTransaction:
            Issue.record("no app transaction vectors")
        }
    }

    @Test(arguments: appleJWS)
    func validityNowMatchesTheSource(file: String) async throws {
        let e = try Self.entry(file)
        let okNow = (e["chain_now"] as? String) == "OK"
        let result = try await appleVerifier().verify(Array(try Fixtures.text(file).utf8), now: testNow, validateAt: testNow)
        if okNow {
            #expect(result.isValid, "\(file): \(result.error.map { "\($0)" } ?? "")")
        } else {
            expectInvalid(result, .certificateExpired)
        }
    }

    @Test func productionOnlyRejectsSandboxJWS() async throws {
        let result = try await appleVerifier(allowSandbox: false).verify(Array(try Fixtures.text(Self.appleJWS[0]).utf8), now: testNow)
        expectInvalid(result, .environmentNotAllowed)
    }

    @Test func notificationWithWrongBundleIsRejected() async throws {
        let result = try await appleVerifier(bundleIds: ["com.goodheartapp"]).verify(Array(try Fixtures.text(Self.appleJWS[1]).utf8), now: testNow)
        expectInvalid(result, .bundleMismatch)
    }

    @Test func notificationWithWrongAppAppleIdIsRejected() async throws {
        let verifier = AppStoreVerifier(
            configuration: VerifierConfiguration(
                anchors: try TrustAnchor.appleRoots(allowSandbox: true), bundleIds: nil, appAppleId: 42))
        expectInvalid(await verifier.verify(Array(try Fixtures.text(Self.appleJWS[1]).utf8), now: testNow), .appAppleIdMismatch)
    }

    func testCAVerifier() throws -> AppStoreVerifier {
        AppStoreVerifier(
            configuration: VerifierConfiguration(
                anchors: [
                    try .custom(try Fixtures.bytes("certs/apple_swiftlib_testCA.cer"), environments: [.sandbox], requireAppleExtensions: false)
                ],
                bundleIds: ["com.example"]))
    }

    @Test func libraryTestCATransactionIsValidUnderItsRoot() async throws {
        let result = try await testCAVerifier().verify(Array(try Fixtures.text("jws/JT1_testca_transactionInfo.jws").utf8), now: testNow)
        #expect(result.isValid, "\(result.error.map { "\($0)" } ?? "")")
        // x5c[2] differs from the configured root's bytes but is never used.
        #expect(result.evidence.signing?.anchorKind == .custom)
    }

    @Test func libraryTestCACarriesTheAppleOIDs() async throws {
        // Contrary to the vectors README, the library's test leaf and intermediate do carry
        // 1.2.840.113635.100.6.11.1 and …6.2.1, so JT1 passes with the OID check on too.
        let verifier = AppStoreVerifier(
            configuration: VerifierConfiguration(
                anchors: [try .custom(try Fixtures.bytes("certs/apple_swiftlib_testCA.cer"), environments: [.sandbox], requireAppleExtensions: true)],
                bundleIds: nil))
        #expect(await verifier.verify(Array(try Fixtures.text("jws/JT1_testca_transactionInfo.jws").utf8), now: testNow).isValid)
    }

    @Test func wrongBundleIdVectorIsRejected() async throws {
        expectInvalid(
            try await testCAVerifier().verify(Array(try Fixtures.text("jws/JT4_testca_wrongBundleId.jws").utf8), now: testNow), .bundleMismatch)
    }

    @Test func missingX5CVectorIsRejected() async throws {
        expectInvalid(
            try await testCAVerifier().verify(Array(try Fixtures.text("jws/JT5_testca_missingX5CHeaderClaim.jws").utf8), now: testNow),
            .certificateChainMissing)
    }

    @Test func appleRootsDoNotTrustTheLibraryTestCA() async throws {
        expectInvalid(
            try await appleVerifier().verify(Array(try Fixtures.text("jws/JT1_testca_transactionInfo.jws").utf8), now: testNow), .chainUntrusted)
    }

    @Test func xcodeJWSValidOnlyUnderXcodePolicy() async throws {
        let jws = Array(try Fixtures.text("jws/JX2_xcode_signed_transaction_2023.jws").utf8)
        let xcode = AppStoreVerifier(
            configuration: VerifierConfiguration(
                anchors: [try .xcode(try Fixtures.bytes("certs/xcode_jws_StoreKitTestingInXcode.cer"))],
                bundleIds: ["com.example.naturelab.backyardbirds.example"]))
        let result = await xcode.verify(jws, now: testNow)
        #expect(result.isValid, "\(result.error.map { "\($0)" } ?? "")")
        #expect(result.evidence.environment == .xcode)
        guard case .transaction(let t) = result.evidence.signed else { Issue.record("not a transaction"); return }
        #expect(t.transactionId == "0")
        #expect(t.productId == "pass.premium")
        // Fractional milliseconds survive.
        #expect(abs((t.purchaseDate?.date.timeIntervalSince1970 ?? 0) - 1697679936.0497297) < 0.000_01)
        // Source: "chain_now … certificate has expired".
        expectInvalid(await xcode.verify(jws, now: testNow, validateAt: testNow), .certificateExpired)
        expectInvalid(try await appleVerifier().verify(jws, now: testNow), .chainUntrusted)
    }
}
