import CofferCore
import CofferSandbox
import Foundation
import Testing

/// Fields outside the signed bytes hold exactly what Apple, Xcode and the sandbox write:
/// anything else is refused (a change there is harmless, but accepting it is how a bit flip
/// used to verify, one run in thirteen).
@Suite struct StrictEnvelopeTests {
    func mint(_ encoding: ReceiptEncoding, ca: SandboxCA = sharedCA) throws -> [UInt8] {
        try ca.mintReceipt(demoReceipt(), now: testNow, encoding: encoding)
    }

    func encoding(ber: Bool = false, _ change: (inout ReceiptEncoding) -> Void = { _ in }) -> ReceiptEncoding {
        var encoding = ReceiptEncoding()
        encoding.ber = ber
        change(&encoding)
        return encoding
    }

    @Test(arguments: [false, true])
    func theDefaultEnvelopeVerifies(ber: Bool) async throws {
        #expect(try await sandboxVerifier().verify(try mint(encoding(ber: ber)), now: testNow).isValid)
    }

    @Test(arguments: [Int64(0), 2, 3, 4, 5, 129])
    func signedDataVersionIsOne(version: Int64) async throws {
        for ber in [false, true] {
            let receipt = try mint(encoding(ber: ber) { $0.signedDataVersion = version })
            expectInvalid(try await sandboxVerifier().verify(receipt, now: testNow), .unsupportedFormat)
        }
    }

    @Test(arguments: [Int64(0), 2, 3, 5])
    func signerInfoVersionIsOne(version: Int64) async throws {
        expectInvalid(try await sandboxVerifier().verify(try mint(encoding { $0.signerInfoVersion = version }), now: testNow), .unsupportedFormat)
    }

    @Test func digestAlgorithmsIsExactlyTheSignersDigest() async throws {
        for extra in [[DigestAlgorithm.sha1], [.sha256], [.sha512, .sha384]] {
            let receipt = try mint(encoding { $0.extraDigestAlgorithms = extra })
            expectInvalid(try await sandboxVerifier().verify(receipt, now: testNow), .malformed)
        }
    }

    @Test func signatureAlgorithmMayNameTheDigestExceptSHA1() async throws {
        for digest in [DigestAlgorithm.sha256, .sha384, .sha512] {
            let receipt = try mint(
                encoding {
                    $0.digest = digest
                    $0.signatureAlgorithmNamesDigest = true
                })
            #expect(try await sandboxVerifier().verify(receipt, now: testNow).isValid, "\(digest)WithRSAEncryption")
        }
        // sha1WithRSAEncryption is one bit from rsaEncryption: refused (no real receipt uses it).
        let sha1 = try mint(
            encoding {
                $0.digest = .sha1
                $0.signatureAlgorithmNamesDigest = true
            })
        expectInvalid(try await sandboxVerifier().verify(sha1, now: testNow), .unsupportedAlgorithm)
        #expect(try await sandboxVerifier().verify(try mint(encoding { $0.digest = .sha1 }), now: testNow).isValid)
    }

    @Test(arguments: [false, true])
    func crlsAndUnsignedAttributesAreRefused(ber: Bool) async throws {
        expectInvalid(try await sandboxVerifier().verify(try mint(encoding(ber: ber) { $0.crls = true }), now: testNow), .unsupportedFormat)
        expectInvalid(try await sandboxVerifier().verify(try mint(encoding(ber: ber) { $0.unsignedAttributes = true }), now: testNow), .malformed)
    }

    @Test func aDuplicatedCertificateIsRefused() async throws {
        expectInvalid(try await sandboxVerifier().verify(try mint(encoding { $0.duplicateIntermediate = true }), now: testNow), .chainUntrusted)
    }

    // MARK: Certificates: bytes outside their signed part

    /// Offsets of the children of the DER element at `offset` (definite lengths only).
    static func children(_ bytes: [UInt8], at offset: Int) -> [Int] {
        func header(_ i: Int) -> (length: Int, size: Int) {
            let first = bytes[i + 1]
            if first < 0x80 { return (Int(first), 2) }
            let count = Int(first & 0x7F)
            return ((0..<count).reduce(0) { $0 << 8 | Int(bytes[i + 2 + $1]) }, 2 + count)
        }
        let (length, size) = header(offset)
        var position = offset + size
        var out: [Int] = []
        while position < offset + size + length {
            out.append(position)
            let (l, s) = header(position)
            position += s + l
        }
        return out
    }

    static func headerSize(_ bytes: [UInt8], at offset: Int) -> Int { bytes[offset + 1] < 0x80 ? 2 : 2 + Int(bytes[offset + 1] & 0x7F) }

    /// Places in a certificate's DER whose change swift-certificates alone would not notice.
    enum Spot: String, CaseIterable, Sendable {
        /// The signatureValue BIT STRING's unused-bits count (outside the signed bytes).
        case signatureUnusedBits
        /// The subjectPublicKey BIT STRING's unused-bits count.
        case keyUnusedBits
        /// The last byte of the outer signatureAlgorithm OID (ecdsaWithSHA256 → …SHA384).
        case outerAlgorithm
    }

    /// The offset of `spot` in `certificate`.
    static func offset(of spot: Spot, in certificate: [UInt8]) -> Int {
        let parts = children(certificate, at: 0)
        switch spot {
        case .signatureUnusedBits:
            return parts[2] + headerSize(certificate, at: parts[2])
        case .keyUnusedBits:
            let tbs = children(certificate, at: parts[0])
            let spki = tbs[certificate[tbs[0]] == 0xA0 ? 6 : 5]
            let key = children(certificate, at: spki)[1]
            return key + headerSize(certificate, at: key)
        case .outerAlgorithm:
            let oid = children(certificate, at: parts[1])[0]
            return oid + headerSize(certificate, at: oid) + Int(certificate[oid + 1]) - 1
        }
    }

    static func find(_ needle: [UInt8], in haystack: [UInt8]) throws -> Int {
        try #require((0...(haystack.count - needle.count)).first { haystack[$0..<($0 + needle.count)].elementsEqual(needle) })
    }

    static func patches(_ spot: Spot) -> [(UInt8) -> UInt8] {
        switch spot {
        case .signatureUnusedBits, .keyUnusedBits: (1...7).map { n in { _ in n } }
        case .outerAlgorithm: [{ $0 ^ 0x01 }]
        }
    }

    @Test(arguments: Spot.allCases)
    func receiptCertificatesAreStrictOutsideTheirSignedBytes(spot: Spot) async throws {
        let verifier = try sandboxVerifier()
        for ber in [false, true] {
            let receipt = try mint(encoding(ber: ber))
            for certificate in [sharedCA.receiptSigner, sharedCA.intermediate, sharedCA.root] {
                let der = try SandboxCA.derBytes(of: certificate)
                let at = try Self.find(der, in: receipt) + Self.offset(of: spot, in: der)
                for patch in Self.patches(spot) {
                    var mutated = receipt
                    mutated[at] = patch(mutated[at])
                    let result = await verifier.verify(mutated, now: testNow)
                    expectInvalid(result, .malformed)
                }
            }
        }
    }

    @Test(arguments: Spot.allCases)
    func x5cCertificatesAreStrictOutsideTheirSignedBytes(spot: Spot) async throws {
        // The leaf key signs a header holding the patched certificate: only the check on the
        // certificate's own bytes can refuse it.
        let verifier = try sandboxVerifier()
        let spec = TransactionSpec(bundleId: "com.coffer.demo", productId: "level.pack.1", transactionId: "8000")
        let certificates = [
            (JWSEncoding.Part.leaf, sharedCA.jwsSigner), (.intermediate, sharedCA.intermediate), (.root, sharedCA.root),
        ]
        for (index, (_, certificate)) in certificates.enumerated() {
            var der = try SandboxCA.derBytes(of: certificate)
            let at = Self.offset(of: spot, in: der)
            for patch in Self.patches(spot) {
                der[at] = patch(try SandboxCA.derBytes(of: certificate)[at])
                var parts = certificates.map(\.0)
                parts[index] = .der(der)
                var encoding = JWSEncoding()
                encoding.chain = .parts(parts)
                let jws = try sharedCA.mintTransaction(spec, now: testNow, encoding: encoding)
                expectInvalid(await verifier.verify(Array(jws.utf8), now: testNow), .malformed)
            }
        }
    }

    @Test func signerIsFoundByItsExactIssuerAndSerialBytes() async throws {
        // A SignerInfo serial one bit away from the certificate's names no certificate.
        let receipt = try mint(encoding())
        let leaf = try SandboxCA.derBytes(of: sharedCA.receiptSigner)
        let tbs = Self.children(leaf, at: Self.children(leaf, at: 0)[0])
        let serialTLV = Array(leaf[tbs[1]..<tbs[2]])
        // The SignerInfo's copy is the last occurrence (the certificate's comes first).
        let certificateSerial = try Self.find(serialTLV, in: receipt)
        let tail = Array(receipt[(certificateSerial + serialTLV.count)...])
        let signerSerial = certificateSerial + serialTLV.count + (try Self.find(serialTLV, in: tail))
        var mutated = receipt
        mutated[signerSerial + 2] ^= 0x01
        expectInvalid(try await sandboxVerifier().verify(mutated, now: testNow), .signerNotFound)
    }
}
