import Crypto
import Foundation
import X509

/// How a verifier decides what to trust.
///
/// ```swift
/// let config = VerifierConfiguration(
///     anchors: try TrustAnchor.appleRoots(allowSandbox: false),  // Production only
///     bundleIds: ["com.example.game"])
/// ```
public struct VerifierConfiguration: Sendable {
    public var anchors: [TrustAnchor]
    /// Accepted bundle identifiers. `nil` skips the check (inspection only: a server must set it).
    public var bundleIds: Set<String>?
    /// When set, payloads that carry an app Apple ID must carry this one.
    public var appAppleId: Int64?
    public var limits: VerificationLimits

    public init(anchors: [TrustAnchor], bundleIds: Set<String>?, appAppleId: Int64? = nil, limits: VerificationLimits = .init()) {
        self.anchors = anchors
        self.bundleIds = bundleIds
        self.appAppleId = appAppleId
        self.limits = limits
    }
}

/// How the data was signed, once its chain verified.
public struct SigningInfo: Sendable, Hashable {
    /// `sha1`, `sha256`, … for receipts; `ES256` for JWS.
    public var digest: String
    /// Subject common names, leaf first.
    public var chain: [String]
    /// The instant the chain was validated at (receipt creation date or JWS `signedDate`).
    public var validatedAt: Date
    public var anchorKind: TrustAnchor.Kind
}

/// Everything learnt about an input, verified or not. On an invalid verdict the fields
/// hold what could still be decoded (for inspection), and must not be trusted.
public struct Evidence: Sendable, Hashable {
    public var kind: PayloadKind?
    public var environment: Environment?
    public var signing: SigningInfo?
    public var receipt: AppReceipt?
    public var signed: SignedPayload?
    /// The JWS payload JSON as received (for inspection output).
    public var payloadJSON: [UInt8]?
    public var isBER = false

    public init() {}
}

/// The outcome of a verification: a value, never a thrown "no".
public enum VerificationResult: Sendable {
    case valid(Evidence)
    case invalid(VerificationError, Evidence)

    public var isValid: Bool { if case .valid = self { true } else { false } }
    public var error: VerificationError? { if case .invalid(let e, _) = self { e } else { nil } }
    public var evidence: Evidence {
        switch self {
        case .valid(let e), .invalid(_, let e): e
        }
    }
}

/// Verifies legacy App Store receipts (PKCS#7) and StoreKit 2 signed data (JWS) against
/// configured trust anchors. Pure: no I/O, and time is always passed in.
///
/// ```swift
/// let verifier = AppStoreVerifier(configuration: config)
/// switch await verifier.verify(bytes, now: .now) {
/// case .valid(let evidence): print(evidence.receipt?.inApp ?? [])
/// case .invalid(let error, _): print(error.code)
/// }
/// ```
public final class AppStoreVerifier: Sendable {
    public let configuration: VerifierConfiguration
    let chains: ChainValidator

    public init(configuration: VerifierConfiguration) {
        self.configuration = configuration
        self.chains = ChainValidator(anchors: configuration.anchors)
    }

    /// Auto-detects the input: PKCS#7 DER/BER, base64 of it, or a compact JWS.
    /// - Parameters:
    ///   - now: the current time (used only when the data carries no signing date).
    ///   - validateAt: validate certificate chains at this instant instead of the data's own
    ///     signing time (receipt creation date, JWS `signedDate`). For inspection and audits.
    public func verify(_ input: [UInt8], now: Date, validateAt: Date? = nil, deviceIdentifier: [UInt8]? = nil) async -> VerificationResult {
        guard input.count <= configuration.limits.maxInputBytes * 2 else {
            return .invalid(VerificationError(.limitExceeded, "input of \(input.count) bytes"), Evidence())
        }
        switch Self.detect(input) {
        case .pkcs7(let der): return await verifyReceipt(der, now: now, validateAt: validateAt, deviceIdentifier: deviceIdentifier)
        case .jws(let bytes): return await verifySignedData(bytes: bytes, now: now, validateAt: validateAt)
        case .unsupported(let why): return .invalid(VerificationError(.unsupportedFormat, why), Evidence())
        }
    }

    enum Detected { case pkcs7([UInt8]), jws(ArraySlice<UInt8>), unsupported(String) }

    static func detect(_ input: [UInt8]) -> Detected {
        if input.first == 0x30 { return .pkcs7(input) }
        func isSpace(_ c: UInt8) -> Bool { c == 0x20 || c == 0x0A || c == 0x0D || c == 0x09 }
        guard let start = input.firstIndex(where: { !isSpace($0) }), let last = input.lastIndex(where: { !isSpace($0) }) else {
            return .unsupported("empty input")
        }
        let trimmed = input[start...last]
        if trimmed.starts(with: "eyJ".utf8) { return .jws(trimmed) }
        if trimmed.starts(with: "{".utf8) || trimmed.starts(with: "<?xml".utf8) || trimmed.starts(with: "bplist".utf8) {
            return .unsupported("a property list (iOS 6 style transaction receipt), not a PKCS#7 app receipt")
        }
        if let der = Base64.decode(bytes: trimmed, url: false), !der.isEmpty {
            if der.first == 0x30 { return .pkcs7(der) }
            if der.first == 0x7B { return .unsupported("a base64 property list (iOS 6 style transaction receipt), not a PKCS#7 app receipt") }
            return .unsupported("base64 text that is not a PKCS#7 receipt")
        }
        return .unsupported("neither PKCS#7 (DER/BER), base64 nor a JWS")
    }

    // MARK: Legacy receipts

    /// Verifies a legacy app receipt (PKCS#7 SignedData, DER or BER).
    /// - Parameters:
    ///   - deviceIdentifier: when given (16 bytes, e.g. identifierForVendor), the receipt's
    ///     SHA-1 hash (attribute 5) must match it.
    public func verifyReceipt(_ der: [UInt8], now: Date, validateAt: Date? = nil, deviceIdentifier: [UInt8]? = nil) async -> VerificationResult {
        var evidence = Evidence()
        evidence.kind = .appReceipt
        do throws(VerificationError) {
            try await verifyReceipt(der, validateAt: validateAt, deviceIdentifier: deviceIdentifier, into: &evidence)
            return .valid(evidence)
        } catch {
            return .invalid(error, evidence)
        }
    }

    private func verifyReceipt(_ der: [UInt8], validateAt: Date?, deviceIdentifier: [UInt8]?, into evidence: inout Evidence)
        async throws(VerificationError)
    {
        let limits = configuration.limits
        guard der.count <= limits.maxInputBytes else {
            throw VerificationError(.limitExceeded, "receipt of \(der.count) bytes exceeds \(limits.maxInputBytes)")
        }
        let envelope = try SignedDataEnvelope.parse(der, limits: limits)
        evidence.isBER = envelope.isBER
        let receipt = try AppReceipt.decode(envelope.content, limits: limits)
        evidence.receipt = receipt
        evidence.environment = receipt.environment
        guard let creationDate = receipt.creationDate else {
            throw VerificationError(.malformed, "receipt has no creation date (attribute 12)")
        }
        let validationTime = validateAt ?? creationDate

        // Chain, validated at the receipt's creation date; cached by exact certificate bytes.
        let key = CacheKey([0x52], envelope.certificatesEncoded, envelope.signer.sidEncoded)
        let chain: ValidatedChain
        if let hit = chains.cached(key, at: validationTime) {
            chain = hit
        } else {
            chain = try await validateReceiptChain(envelope, at: validationTime)
            chains.remember(chain, key: key)
        }
        evidence.signing = SigningInfo(
            digest: envelope.signer.digest.rawValue, chain: chain.subjects, validatedAt: validationTime, anchorKind: chain.anchor.kind)

        // Signature over the content (or over the signed attributes, which hold its digest).
        let algorithm: Certificate.SignatureAlgorithm
        let contentDigest: [UInt8]?
        switch envelope.signer.digest {
        case .sha1: algorithm = .sha1WithRSAEncryption
        case .sha256: algorithm = .sha256WithRSAEncryption
        case .sha384: algorithm = .sha384WithRSAEncryption
        case .sha512: algorithm = .sha512WithRSAEncryption
        }
        if envelope.signer.signedAttributesEncoded != nil {
            contentDigest = Self.digest(envelope.signer.digest, envelope.content)
        } else {
            contentDigest = nil
        }
        let signed = try contentDigest.flatMap { digest throws(VerificationError) in try envelope.signedBytes(contentDigest: digest) }
        let valid: Bool
        if let signed {
            valid = chain.leafKey.isValidSignature(envelope.signer.signature, for: signed, signatureAlgorithm: algorithm)
        } else {
            valid = chain.leafKey.isValidSignature(envelope.signer.signature, for: envelope.content, signatureAlgorithm: algorithm)
        }
        guard valid else {
            throw VerificationError(.signatureInvalid, "receipt signature does not verify with \(chain.subjects.first ?? "the signer")")
        }

        // Policy.
        guard let environment = receipt.environment else {
            throw VerificationError(.environmentNotAllowed, "receipt type \(receipt.receiptType.map { "'\($0)'" } ?? "(absent)") is not recognised")
        }
        try checkEnvironment(environment, anchor: chain.anchor)
        try checkBundle(receipt.bundleId)
        if let expected = configuration.appAppleId, environment == .production, let actual = receipt.appAppleId, actual != 0, actual != expected {
            throw VerificationError(.appAppleIdMismatch, "receipt app id \(actual), expected \(expected)")
        }
        if let deviceIdentifier {
            guard let opaque = receipt.opaque, let hash = receipt.sha1Hash, let bundleBytes = receipt.bundleIdValueBytes else {
                throw VerificationError(.deviceMismatch, "receipt lacks the opaque value, hash or bundle id needed for the device check")
            }
            var sha1 = Insecure.SHA1()
            sha1.update(data: deviceIdentifier)
            sha1.update(data: opaque)
            sha1.update(data: bundleBytes)
            guard Array(sha1.finalize()) == hash else {
                throw VerificationError(.deviceMismatch, "receipt hash does not match the device identifier")
            }
        }
    }

    private func validateReceiptChain(_ envelope: SignedDataEnvelope, at time: Date) async throws(VerificationError) -> ValidatedChain {
        var certificates: [ReceivedCertificate] = []
        for der in envelope.certificates {
            let received = try chains.received(der, "a certificate in the receipt")
            guard !certificates.contains(where: { $0.der == der }) else {
                throw VerificationError(.chainUntrusted, "the receipt carries \(received.name) twice")
            }
            certificates.append(received)
        }
        // The signer: the exact issuer Name bytes and serial number bytes of the SignerInfo.
        guard
            let signerIndex = certificates.firstIndex(where: {
                $0.shape.issuer.elementsEqual(envelope.signer.issuerEncoded) && $0.shape.serial.elementsEqual(envelope.signer.serialBytes)
            })
        else {
            throw VerificationError(.signerNotFound, "no certificate matches the signer's issuer and serial number")
        }
        let leaf = certificates[signerIndex]
        var others = certificates
        others.remove(at: signerIndex)
        let chain: ValidatedChain
        if let direct = chains.directAnchor(for: leaf) {
            chain = try chains.validateDirect(leaf, anchor: direct, at: time)
        } else {
            chain = try await chains.validate(leaf: leaf, intermediates: try ChainValidator.path(from: leaf, through: others), at: time)
        }
        // Every certificate the receipt carries must be part of the validated chain (a copy
        // of the root must be byte-equal to the configured anchor): nothing in the envelope is
        // left unchecked.
        let used = Set(chain.certificates)
        for received in certificates where !used.contains(received.certificate) {
            throw VerificationError(.chainUntrusted, "the receipt carries a certificate outside its chain: \(received.name)")
        }
        return chain
    }

    static func digest(_ algorithm: DigestAlgorithm, _ bytes: ArraySlice<UInt8>) -> [UInt8] {
        switch algorithm {
        case .sha1: Array(Insecure.SHA1.hash(data: bytes))
        case .sha256: Array(SHA256.hash(data: bytes))
        case .sha384: Array(SHA384.hash(data: bytes))
        case .sha512: Array(SHA512.hash(data: bytes))
        }
    }

    // MARK: Policy

    func checkEnvironment(_ environment: Environment, anchor: TrustAnchor) throws(VerificationError) {
        guard anchor.environments.contains(environment) else {
            let allowed = anchor.environments.sorted().map(\.rawValue).joined(separator: ", ")
            throw VerificationError(
                .environmentNotAllowed,
                "\(environment.rawValue) data signed under \(anchor.certificate.commonName ?? "a root") that vouches for \(allowed)")
        }
    }

    func checkBundle(_ bundleId: String?) throws(VerificationError) {
        guard let accepted = configuration.bundleIds else { return }
        guard let bundleId, accepted.contains(bundleId) else {
            throw VerificationError(.bundleMismatch, "bundle id \(bundleId.map { "'\($0)'" } ?? "(absent)") is not configured")
        }
    }
}
