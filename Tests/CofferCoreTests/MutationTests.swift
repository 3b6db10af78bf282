import CofferCore
import CofferSandbox
import CofferTestSupport
import Foundation
import Testing

/// Hostile bytes: every real and sandbox vector, mutated, must never verify and never crash.
///
/// Sandbox inputs come from CAs created fresh on every run — one with seeded keys and serial
/// numbers, one fully random (`sharedCA`) — so the checks must hold for any CA, not for the
/// bytes of one run: every single-bit flip of the sandbox receipts is tried (DER and BER), and
/// fixed-seed samples of flips for the real vectors and JWS.
@Suite struct MutationTests {
    /// Keys and serial numbers from a fixed seed; the RSA receipt key and the ECDSA signature
    /// nonces are still fresh each run.
    static let seededCA: SandboxCA = {
        var options = SandboxCA.Options()
        options.seed = 0xC0FF_EE00_5EED
        options.commonNamePrefix = "Coffer Seeded"
        do { return try SandboxCA.create(now: testNow, options: options) } catch { fatalError("seeded sandbox CA: \(error)") }
    }()

    static var cas: [(name: String, ca: SandboxCA)] { [("seeded", seededCA), ("random", sharedCA)] }

    /// A verifier that trusts everything the vectors chain to (so the originals are valid).
    static func permissiveVerifier() throws -> AppStoreVerifier {
        AppStoreVerifier(
            configuration: VerifierConfiguration(
                anchors: try TrustAnchor.appleRoots(allowSandbox: true) + [
                    try .xcode(try Fixtures.bytes("certs/StoreKitTestCertificate_xcode_receipts.cer")),
                    try .custom(
                        try Fixtures.bytes("certs/xcode_jws_StoreKitTestingInXcode.cer"), environments: [.xcode], requireAppleExtensions: false,
                        signsDirectly: true),
                    try .custom(try Fixtures.bytes("certs/apple_swiftlib_testCA.cer"), environments: [.sandbox], requireAppleExtensions: true),
                    try sharedCA.anchor(),
                    try seededCA.anchor(),
                ],
                bundleIds: nil))
    }

    static var inputs: [(String, [UInt8])] {
        get throws {
            var out: [(String, [UInt8])] = []
            for file in RealLegacyReceiptTests.appleLegacy + [
                "xcode/X02_apple_xcode_app_receipt_with_transaction_2023.der", "xcode/X05_kvitto_xcode_storekit_test_eehelper_2020.der",
            ] {
                out.append((file, try Fixtures.bytes(file)))
            }
            for file in RealJWSTests.appleJWS + ["jws/JT1_testca_transactionInfo.jws", "jws/JX2_xcode_signed_transaction_2023.jws"] {
                out.append((file, Array(try Fixtures.text(file).utf8)))
            }
            for (name, ca) in cas {
                for (kind, receipt) in try sandboxReceipts(ca) { out.append(("\(name) sandbox \(kind)", receipt)) }
                out.append(
                    (
                        "\(name) sandbox JWS",
                        Array(try ca.mintTransaction(TransactionSpec(bundleId: "b", productId: "p", transactionId: "1"), now: testNow).utf8)
                    ))
            }
            return out
        }
    }

    /// DER, BER (chunked content) and DER with signed attributes.
    static func sandboxReceipts(_ ca: SandboxCA) throws -> [(String, [UInt8])] {
        var ber = ReceiptEncoding()
        ber.ber = true
        ber.chunkSize = 64
        var attributes = ReceiptEncoding()
        attributes.signedAttributes = true
        return [
            ("DER", try ca.mintReceipt(demoReceipt(), now: testNow)),
            ("BER", try ca.mintReceipt(demoReceipt(), now: testNow, encoding: ber)),
            ("DER+attributes", try ca.mintReceipt(demoReceipt(), now: testNow, encoding: attributes)),
        ]
    }

    /// A sandbox receipt (CA index and kind) or a real one (fixture path).
    struct ReceiptCase: Sendable, CustomTestStringConvertible {
        var ca = 0
        var kind = 0
        var fixture: String?
        var testDescription: String { fixture ?? "\(MutationTests.cas[ca].name) \(["DER", "BER", "DER+attributes"][kind])" }

        func bytes() throws -> [UInt8] {
            if let fixture { return try Fixtures.bytes(fixture) }
            return try MutationTests.sandboxReceipts(MutationTests.cas[ca].ca)[kind].1
        }

        var seed: UInt64 { 0x5EED_0000 + UInt64(ca * 8 + kind) + UInt64(fixture?.utf8.count ?? 0) << 16 }
    }

    /// Fresh sandbox CAs in three encodings, and the real receipts but L03 (79 KB: each
    /// verification decodes 187 records, and its envelope is shaped like L11's).
    static let receiptCases =
        (0..<2).flatMap { ca in (0..<3).map { ReceiptCase(ca: ca, kind: $0) } }
        + [
            "legacy/L01_tp_production_getpure_2024.der", "legacy/L08_kvitto_sandbox_emmiview_6iap_2015.der",
            "legacy/L11_rc_sandbox_revenuecat_sample1_2020.der", "xcode/X02_apple_xcode_app_receipt_with_transaction_2023.der",
            "xcode/X05_kvitto_xcode_storekit_test_eehelper_2020.der",
        ].map { ReceiptCase(fixture: $0) }

    /// One BER/DER element, found by the test's own walker (independent of the verifier's).
    struct Element {
        var start: Int
        var valueStart: Int
        var valueEnd: Int
        var end: Int
        var tag: UInt8
        var children: [Element]
    }

    /// Parses the element at `index` (definite and indefinite lengths; children of
    /// constructed elements). Test inputs are well formed: no bounds checks beyond Swift's.
    static func element(_ bytes: [UInt8], at index: Int) -> Element {
        let tag = bytes[index]
        let first = bytes[index + 1]
        var length: Int?
        var header = 2
        if first < 0x80 {
            length = Int(first)
        } else if first > 0x80 {
            let count = Int(first & 0x7F)
            length = (0..<count).reduce(0) { $0 << 8 | Int(bytes[index + 2 + $1]) }
            header += count
        }
        let valueStart = index + header
        var children: [Element] = []
        if let length {
            if tag & 0x20 != 0 {
                var p = valueStart
                while p < valueStart + length {
                    children.append(element(bytes, at: p))
                    p = children[children.count - 1].end
                }
            }
            return Element(
                start: index, valueStart: valueStart, valueEnd: valueStart + length, end: valueStart + length, tag: tag, children: children)
        }
        var p = valueStart
        while !(bytes[p] == 0 && bytes[p + 1] == 0) {
            children.append(element(bytes, at: p))
            p = children[children.count - 1].end
        }
        return Element(start: index, valueStart: valueStart, valueEnd: p, end: p + 2, tag: tag, children: children)
    }

    /// The byte ranges of a sandbox receipt whose every change a signature check (or the
    /// byte comparison of the root copy with the configured anchor) must catch: certificate
    /// TBS contents, certificate signature contents (after the unused-bits byte), eContent
    /// chunk contents, signed-attribute contents and the RSA signature. Everything else —
    /// the structure, versions, algorithm identifiers, signer id, headers, BIT STRING
    /// unused-bits bytes — is what a lax parser could let change.
    static func signedInteriors(_ bytes: [UInt8]) -> [Range<Int>] {
        let signedData = element(bytes, at: 0).children[1].children[0]
        var ranges: [Range<Int>] = []
        let eContent = signedData.children[2].children[1].children[0]
        if eContent.children.isEmpty {
            ranges.append(eContent.valueStart..<eContent.valueEnd)
        } else {
            ranges += eContent.children.map { $0.valueStart..<$0.valueEnd }
        }
        for certificate in signedData.children[3].children {
            let tbs = certificate.children[0]
            let signature = certificate.children[2]
            ranges += [tbs.valueStart..<tbs.valueEnd, (signature.valueStart + 1)..<signature.valueEnd]
        }
        for field in signedData.children[4].children[0].children where field.tag == 0xA0 || field.tag == 0x04 {
            ranges.append(field.valueStart..<field.valueEnd)
        }
        return ranges
    }

    /// Every bit of every byte outside the signed interiors, each flipped alone, plus a
    /// fixed-seed sample of 48 bytes inside them: nothing outside the signed bytes may change
    /// unnoticed, whatever the fresh CA's bytes happen to be. (Every bit of every byte of the
    /// six sandbox receipts took 55 s on the 2-core CI machine; this covers every unsigned
    /// byte of them and of five real receipts in a fraction of that.)
    @Test(arguments: receiptCases)
    func everyUnsignedBitFlipOfAReceiptIsRefused(_ receiptCase: ReceiptCase) async throws {
        let verifier = try Self.permissiveVerifier()
        let bytes = try receiptCase.bytes()
        #expect(await verifier.verify(bytes, now: testNow).isValid)
        let interiors = Self.signedInteriors(bytes)
        var signed = [Bool](repeating: false, count: bytes.count)
        for range in interiors { for i in range { signed[i] = true } }
        var positions = bytes.indices.filter { !signed[$0] }
        let unsignedCount = positions.count
        var rng = SplitMix64(state: receiptCase.seed)
        let inside = bytes.indices.filter { signed[$0] }
        positions += (0..<48).map { _ in inside[Int.random(in: 0..<inside.count, using: &rng)] }
        var accepted: [String] = []
        for index in positions {
            for bit in 0..<8 {
                var mutated = bytes
                mutated[index] ^= UInt8(1) << bit
                if await verifier.verify(mutated, now: testNow).isValid { accepted.append("byte \(index) bit \(bit)") }
            }
        }
        #expect(unsignedCount > 150, "the walk found the envelope's structure")
        #expect(
            accepted.isEmpty,
            "\(receiptCase.testDescription) (\(bytes.count) bytes, \(unsignedCount) unsigned): \(accepted.count) flips accepted: \(accepted.prefix(20))"
        )
    }

    @Test func originalsAreValid() async throws {
        let verifier = try Self.permissiveVerifier()
        for (name, bytes) in try Self.inputs {
            let result = await verifier.verify(bytes, now: testNow)
            #expect(result.isValid, "\(name): \(result.error.map { "\($0)" } ?? "")")
        }
    }

    @Test func bitFlipsAreNeverAccepted() async throws {
        let verifier = try Self.permissiveVerifier()
        var rng = SplitMix64(state: 0xC0FFEE)
        for (name, bytes) in try Self.inputs {
            for _ in 0..<120 {
                let index = Int.random(in: 0..<bytes.count, using: &rng)
                let bit = UInt8(1) << UInt8.random(in: 0..<8, using: &rng)
                var mutated = bytes
                mutated[index] ^= bit
                let accepted = await verifier.verify(mutated, now: testNow).isValid
                #expect(!accepted, "\(name): flipping bit \(bit) of byte \(index) was accepted")
            }
        }
    }

    @Test func lengthFieldEditsAndTruncationsAreNeverAccepted() async throws {
        let verifier = try Self.permissiveVerifier()
        var rng = SplitMix64(state: 0xBEEF)
        for (name, bytes) in try Self.inputs {
            // Truncations.
            for _ in 0..<40 {
                let length = Int.random(in: 0..<bytes.count, using: &rng)
                #expect(!(await verifier.verify(Array(bytes.prefix(length)), now: testNow).isValid), "\(name): truncated to \(length) accepted")
            }
            // Length bytes: the byte after each of the first tags, set to edge values.
            guard bytes.first == 0x30 else { continue }
            for index in stride(from: 1, to: min(bytes.count, 400), by: 3) {
                for value: UInt8 in [0x00, 0x7F, 0x80, 0x81, 0x84, 0x85, 0xFF] where bytes[index] != value {
                    var mutated = bytes
                    mutated[index] = value
                    #expect(!(await verifier.verify(mutated, now: testNow).isValid), "\(name): byte \(index) = \(value) accepted")
                }
            }
        }
    }

    @Test func appendedBytesAreRejected() async throws {
        let verifier = try Self.permissiveVerifier()
        for (name, bytes) in try Self.inputs where bytes.first == 0x30 {
            #expect(!(await verifier.verify(bytes + [0x00], now: testNow).isValid), "\(name) + trailing byte accepted")
            #expect(!(await verifier.verify(bytes + [0x30, 0x00], now: testNow).isValid), "\(name) + trailing element accepted")
        }
    }

    /// BER lets the payload arrive in chunks of any size: every split verifies to the same
    /// receipt; a chunk whose length is off by one (a split at the wrong place) never does.
    @Test func chunkSplitsVerifyAndMisalignedChunksNever() async throws {
        let verifier = try Self.permissiveVerifier()
        var reference: AppReceipt?
        for size in [1, 2, 3, 7, 64, 255, 256, 4096] {
            var encoding = ReceiptEncoding()
            encoding.ber = true
            encoding.chunkSize = size
            let bytes = try sharedCA.mintReceipt(demoReceipt(), now: testNow, encoding: encoding)
            let result = await verifier.verify(bytes, now: testNow)
            #expect(result.isValid, "chunks of \(size): \(result.error.map { "\($0)" } ?? "")")
            if let receipt = result.evidence.receipt {
                if let reference { #expect(receipt.bundleId == reference.bundleId && receipt.inApp == reference.inApp) } else { reference = receipt }
            }
            // Primitive OCTET STRING chunks (04 len) inside the constructed one: nudge each
            // short-form length by ±1.
            guard size >= 2, size < 128 else { continue }
            var index = 0
            var nudged = 0
            while index + 1 < bytes.count, nudged < 6 {
                if bytes[index] == 0x04, Int(bytes[index + 1]) == size {
                    for delta in [-1, 1] {
                        var mutated = bytes
                        mutated[index + 1] = UInt8(size + delta)
                        #expect(!(await verifier.verify(mutated, now: testNow).isValid), "chunk length \(size)\(delta > 0 ? "+" : "-")1 at \(index)")
                    }
                    nudged += 1
                }
                index += 1
            }
            #expect(nudged > 0, "chunks of \(size) found")
        }
    }
}
