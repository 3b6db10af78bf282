import Crypto
import Foundation
import X509

/// The protected header of an App Store JWS.
struct JWSHeader: Decodable {
    var alg: String?
    var x5c: [String]?
    var kid: String?
}

/// A compact JWS split into its parts (ASCII bytes). Parts are not yet verified.
struct CompactJWS {
    var header: ArraySlice<UInt8>
    var payload: ArraySlice<UInt8>
    var signature: ArraySlice<UInt8>
    /// `header.payload`: the bytes the signature covers.
    var signingInput: ArraySlice<UInt8>

    init(_ bytes: ArraySlice<UInt8>) throws(VerificationError) {
        guard let first = bytes.firstIndex(of: 0x2E), let second = bytes[(first + 1)...].firstIndex(of: 0x2E),
            !bytes[(second + 1)...].contains(0x2E)
        else {
            let dots = bytes.reduce(0) { $0 + ($1 == 0x2E ? 1 : 0) }
            throw VerificationError(.malformed, "JWS has \(dots + 1) parts, expected 3")
        }
        header = bytes[bytes.startIndex..<first]
        payload = bytes[(first + 1)..<second]
        signature = bytes[(second + 1)...]
        signingInput = bytes[bytes.startIndex..<second]
        guard !header.isEmpty, !payload.isEmpty else { throw VerificationError(.malformed, "JWS header or payload is empty") }
    }
}

extension AppStoreVerifier {
    /// Verifies a StoreKit 2 compact JWS: a signed transaction, renewal info, app
    /// transaction or App Store Server Notification V2 (whose nested JWS are each verified).
    public func verifySignedData(_ jws: String, now: Date, validateAt: Date? = nil) async -> VerificationResult {
        await verifySignedData(bytes: Array(jws.utf8)[...], now: now, validateAt: validateAt)
    }

    func verifySignedData(bytes: ArraySlice<UInt8>, now: Date, validateAt: Date?) async -> VerificationResult {
        var evidence = Evidence()
        do throws(VerificationError) {
            try await verifyJWS(bytes, now: now, validateAt: validateAt, nested: false, into: &evidence)
            return .valid(evidence)
        } catch {
            return .invalid(error, evidence)
        }
    }

    /// Longest JWS header segment accepted (base64url characters).
    static let maxHeaderCharacters = 16 * 1024
    /// Longest JWS payload segment accepted (base64url characters).
    static let maxPayloadCharacters = 128 * 1024

    private func verifyJWS(
        _ text: ArraySlice<UInt8>, now: Date, validateAt: Date?, nested: Bool, into evidence: inout Evidence
    ) async throws(VerificationError) {
        guard text.count <= configuration.limits.maxInputBytes else {
            throw VerificationError(.limitExceeded, "JWS of \(text.count) characters")
        }
        let jws = try CompactJWS(text)
        // Apple's header (alg and three certificates) is ~4.4 KB and a notification's payload,
        // two signed JWS inside, ~14 KB: the limits are a few times those. Without them a 4 MiB
        // JWS could pad its header around a real Apple chain, which validates and is cached by
        // those bytes, or fill its payload with JSON decoded twice before anything is checked.
        guard jws.header.count <= Self.maxHeaderCharacters else {
            throw VerificationError(.limitExceeded, "JWS header of \(jws.header.count) characters (at most \(Self.maxHeaderCharacters))")
        }
        guard jws.payload.count <= Self.maxPayloadCharacters else {
            throw VerificationError(.limitExceeded, "JWS payload of \(jws.payload.count) characters (at most \(Self.maxPayloadCharacters))")
        }

        // Payload first (unverified) so that we know the kind and the signing date.
        guard let payload = Base64.decode(bytes: jws.payload, url: true) else {
            throw VerificationError(.malformed, "JWS payload is not base64url")
        }
        evidence.payloadJSON = payload
        let signed = try Self.classify(payload)
        evidence.kind = signed.kind
        evidence.signed = signed
        let claimedEnvironment = Self.environmentClaim(signed)
        evidence.environment = claimedEnvironment.flatMap(Environment.init(claim:))
        let validationTime = validateAt ?? Self.signedDate(signed) ?? now

        let chain = try await signingChain(jws, at: validationTime)
        evidence.signing = SigningInfo(digest: "ES256", chain: chain.subjects, validatedAt: validationTime, anchorKind: chain.anchor.kind)
        try Self.checkSignature(jws, chain: chain)

        // Policy: bundle, app Apple ID, environment.
        try checkApp(signed)
        guard let environment = evidence.environment else {
            throw VerificationError(.environmentNotAllowed, "environment \(claimedEnvironment.map { "'\($0)'" } ?? "(absent)") is not recognised")
        }
        try checkEnvironment(environment, anchor: chain.anchor)

        // Notifications: every nested JWS is verified on its own and must agree.
        if case .notification(var notification) = signed {
            guard !nested else { throw VerificationError(.malformed, "notification nested in a notification") }
            if let inner = notification.data?.signedTransactionInfo {
                notification.transaction = try await verifyNested(
                    inner, field: "signedTransactionInfo", expected: "a transaction", environment: environment, now: now, validateAt: validateAt
                ) {
                    if case .transaction(let transaction) = $0 { transaction } else { nil }
                }
            }
            if let inner = notification.data?.signedRenewalInfo {
                notification.renewalInfo = try await verifyNested(
                    inner, field: "signedRenewalInfo", expected: "renewal info", environment: environment, now: now, validateAt: validateAt
                ) {
                    if case .renewalInfo(let renewal) = $0 { renewal } else { nil }
                }
            }
            evidence.signed = .notification(notification)
        }
    }

    /// The header's certificate chain, validated at `validationTime` and cached by the exact
    /// header bytes (alg + x5c).
    private func signingChain(_ jws: CompactJWS, at validationTime: Date) async throws(VerificationError) -> ValidatedChain {
        let key = CacheKey([0x4A], jws.header)
        let chain: ValidatedChain
        if let hit = chains.cached(key, at: validationTime) {
            chain = hit
        } else {
            chain = try await validateHeader(jws.header, at: validationTime)
            chains.remember(chain, key: key)
        }
        return chain
    }

    /// The ES256 signature (raw r ‖ s) over the signing input, checked with the leaf's key.
    private static func checkSignature(_ jws: CompactJWS, chain: ValidatedChain) throws(VerificationError) {
        guard let signatureBytes = Base64.decode(bytes: jws.signature, url: true), signatureBytes.count == 64,
            let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureBytes)
        else { throw VerificationError(.signatureInvalid, "JWS signature is not a 64-byte ES256 signature") }
        guard let key = P256.Signing.PublicKey(chain.leafKey) else {
            throw VerificationError(.unsupportedAlgorithm, "signing certificate key is not P-256")
        }
        guard key.isValidSignature(signature, for: SHA256.hash(data: jws.signingInput)) else {
            throw VerificationError(.signatureInvalid, "JWS signature does not verify with \(chain.subjects.first ?? "the signer")")
        }
    }

    /// A JWS nested in a notification (`field`): verified on its own like any JWS, it must be
    /// `expected` (what `extract` finds in it) and claim the notification's environment.
    private func verifyNested<Payload>(
        _ inner: String, field: String, expected: String, environment: Environment, now: Date, validateAt: Date?,
        _ extract: (SignedPayload?) -> Payload?
    ) async throws(VerificationError) -> Payload {
        var nestedEvidence = Evidence()
        do { try await verifyJWS(Array(inner.utf8)[...], now: now, validateAt: validateAt, nested: true, into: &nestedEvidence) } catch {
            throw VerificationError(error.code, "\(field): \(error.detail)")
        }
        guard let payload = extract(nestedEvidence.signed) else { throw VerificationError(.malformed, "\(field) is not \(expected)") }
        guard nestedEvidence.environment == environment else {
            throw VerificationError(
                .environmentMismatch, "\(field) claims \(nestedEvidence.environment?.rawValue ?? "?"), notification \(environment.rawValue)")
        }
        return payload
    }

    /// The bundle id and app Apple ID the payload is for must be this app's.
    private func checkApp(_ signed: SignedPayload) throws(VerificationError) {
        switch signed {
        case .transaction(let t): try checkBundle(t.bundleId)
        case .appTransaction(let a):
            try checkBundle(a.bundleId)
            try checkAppAppleId(a.appAppleId)
        case .notification(let n):
            try checkBundle(n.data?.bundleId ?? n.summary?.bundleId)
            try checkAppAppleId(n.data?.appAppleId ?? n.summary?.appAppleId)
        case .renewalInfo: break  // carries no bundle id; checked via its notification
        }
    }

    private func checkAppAppleId(_ actual: Int64?) throws(VerificationError) {
        if let expected = configuration.appAppleId, let actual, actual != expected {
            throw VerificationError(.appAppleIdMismatch, "app Apple ID \(actual), expected \(expected)")
        }
    }

    private func validateHeader(_ segment: ArraySlice<UInt8>, at time: Date) async throws(VerificationError) -> ValidatedChain {
        guard let headerBytes = Base64.decode(bytes: segment, url: true) else { throw VerificationError(.malformed, "JWS header is not base64url") }
        let header: JWSHeader
        do { header = try JSONDecoder().decode(JWSHeader.self, from: Data(headerBytes)) } catch {
            throw VerificationError(.malformed, "JWS header is not a JSON object")
        }
        guard let alg = header.alg else { throw VerificationError(.unsupportedAlgorithm, "JWS header has no alg") }
        guard alg == "ES256" else { throw VerificationError(.unsupportedAlgorithm, "JWS alg \(alg.prefix(20)); only ES256 is accepted") }
        guard let x5c = header.x5c, !x5c.isEmpty else { throw VerificationError(.certificateChainMissing, "JWS header has no x5c chain") }
        guard x5c.count == 1 || x5c.count == 3 else {
            throw VerificationError(.chainLengthInvalid, "x5c holds \(x5c.count) certificates; Apple's chain has 3")
        }
        var certificates: [ReceivedCertificate] = []
        for (index, encoded) in x5c.enumerated() {
            guard let der = Base64.decode(encoded) else { throw VerificationError(.malformed, "x5c[\(index)] is not base64") }
            let received = try chains.received(der[...], "x5c[\(index)]")
            guard !certificates.contains(where: { $0.der == received.der }) else {
                throw VerificationError(.chainUntrusted, "x5c repeats a certificate (\(received.name))")
            }
            certificates.append(received)
        }
        if certificates.count == 1 {
            // Only a configured direct-signing anchor (Xcode's StoreKit certificate) signs alone.
            guard let anchor = chains.directAnchor(for: certificates[0]) else {
                throw VerificationError(
                    .chainUntrusted, "a single x5c certificate (\(certificates[0].name)) is accepted only from a direct-signing anchor")
            }
            return try chains.validateDirect(certificates[0], anchor: anchor, at: time)
        }
        // Exactly leaf → intermediate → root, as Apple signs: x5c[2] must stand for a configured
        // root (its bytes are never trusted: the chain is checked against the configured one),
        // and the validated path must be x5c itself — no path built around a carried certificate.
        guard let anchor = chains.chainAnchor(matching: certificates[2]) else {
            throw VerificationError(.chainUntrusted, "x5c[2] (\(certificates[2].name)) is not a configured root")
        }
        let chain = try await chains.validate(leaf: certificates[0], intermediates: [certificates[1]], candidates: [anchor], at: time)
        guard chain.certificates.count == 3, chain.certificates[1] == certificates[1].certificate else {
            throw VerificationError(.chainUntrusted, "the validated chain is not x5c's leaf → intermediate → root")
        }
        return chain
    }

    /// The fields that tell the payload kinds apart.
    private struct KindProbe: Decodable {
        var notificationType: String?
        var transactionId: String?
        var autoRenewProductId: String?
        var autoRenewStatus: Int?
        var renewalDate: Double?
        var receiptType: String?
        var applicationVersion: String?
    }

    static func classify(_ payload: [UInt8]) throws(VerificationError) -> SignedPayload {
        let decoder = JSONDecoder()
        let data = Data(payload)
        let probe: KindProbe
        do { probe = try decoder.decode(KindProbe.self, from: data) } catch {
            throw VerificationError(.malformed, "JWS payload is not a JSON object with the expected field types")
        }
        do {
            if probe.notificationType != nil {
                return .notification(try decoder.decode(SignedNotification.self, from: data))
            }
            if probe.transactionId == nil && (probe.autoRenewProductId != nil || probe.autoRenewStatus != nil || probe.renewalDate != nil) {
                return .renewalInfo(try decoder.decode(SignedRenewalInfo.self, from: data))
            }
            if probe.transactionId == nil && (probe.receiptType != nil || probe.applicationVersion != nil) {
                return .appTransaction(try decoder.decode(SignedAppTransaction.self, from: data))
            }
            return .transaction(try decoder.decode(SignedTransaction.self, from: data))
        } catch {
            throw VerificationError(.malformed, "JWS payload field has the wrong type: \(Self.fieldPath(error))")
        }
    }

    /// The payload field a decoding error is about, by its path only: a `DecodingError`'s own
    /// description names Swift types and coding keys, which a client (and the ledger's attempt
    /// detail) has no use for.
    static func fieldPath(_ error: any Error) -> String {
        let path: [any CodingKey]
        switch error {
        case DecodingError.typeMismatch(_, let c), DecodingError.valueNotFound(_, let c), DecodingError.dataCorrupted(let c): path = c.codingPath
        case DecodingError.keyNotFound(let key, let c): path = c.codingPath + [key]
        default: path = []
        }
        let named = path.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
        return named.isEmpty ? "(the payload)" : LedgerText.escaped(named, maxBytes: 128)
    }

    static func environmentClaim(_ payload: SignedPayload) -> String? {
        switch payload {
        case .transaction(let t): t.environment
        case .renewalInfo(let r): r.environment
        case .appTransaction(let a): a.receiptType
        case .notification(let n): n.data?.environment ?? n.summary?.environment
        }
    }

    static func signedDate(_ payload: SignedPayload) -> Date? {
        switch payload {
        case .transaction(let t): t.signedDate?.date
        case .renewalInfo(let r): r.signedDate?.date
        case .appTransaction(let a): a.signedDate?.date
        case .notification(let n): n.signedDate?.date
        }
    }
}
