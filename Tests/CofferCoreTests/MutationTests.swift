import CofferCore
import CofferSandbox
import Foundation
import Testing

/// Hostile bytes: every real and sandbox vector, mutated, must never verify and never crash.
@Suite struct MutationTests {
    /// Deterministic, so a failure names a reproducible mutation.
    struct SplitMix64: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

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
            var ber = ReceiptEncoding()
            ber.ber = true
            out.append(("sandbox DER", try sharedCA.mintReceipt(demoReceipt(), now: testNow)))
            out.append(("sandbox BER", try sharedCA.mintReceipt(demoReceipt(), now: testNow, encoding: ber)))
            out.append(
                (
                    "sandbox JWS",
                    Array(try sharedCA.mintTransaction(TransactionSpec(bundleId: "b", productId: "p", transactionId: "1"), now: testNow).utf8)
                ))
            return out
        }
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
