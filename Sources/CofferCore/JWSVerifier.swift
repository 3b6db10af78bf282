import Crypto
import Foundation
import X509

/// The protected header of an App Store JWS.
struct JWSHeader: Decodable {
    var alg: String?
    var x5c: [String]?
    var kid: String?
}

/// A compact JWS split into its parts. Parts are not yet verified.
struct CompactJWS {
    var headerSegment: Substring
    var payloadSegment: Substring
    var signatureSegment: Substring
    /// `header.payload`: the bytes the signature covers.
    var signingInput: Substring

    init(_ text: String) throws(VerificationError) {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw VerificationError(.malformed, "JWS has \(parts.count) parts, expected 3") }
        guard !parts[0].isEmpty, !parts[1].isEmpty else { throw VerificationError(.malformed, "JWS header or payload is empty") }
        headerSegment = parts[0]
        payloadSegment = parts[1]
        signatureSegment = parts[2]
        signingInput = text[parts[0].startIndex..<parts[1].endIndex]
    }
}

extension AppStoreVerifier {
    /// Verifies a StoreKit 2 compact JWS: a signed transaction, renewal info, app
    /// transaction or App Store Server Notification V2 (whose nested JWS are each verified).
    public func verifySignedData(_ jws: String, now: Date, validateAt: Date? = nil) async -> VerificationResult {
        var evidence = Evidence()
        do throws(VerificationError) {
            try await verifyJWS(jws, now: now, validateAt: validateAt, nested: false, into: &evidence)
            return .valid(evidence)
        } catch {
            return .invalid(error, evidence)
        }
    }

    private func verifyJWS(_ text: String, now: Date, validateAt: Date?, nested: Bool, into evidence: inout Evidence) async throws(VerificationError)
    {
        guard text.utf8.count <= configuration.limits.maxInputBytes else {
            throw VerificationError(.limitExceeded, "JWS of \(text.utf8.count) characters")
        }
        let jws = try CompactJWS(text)

        // Payload first (unverified) so that we know the kind and the signing date.
        guard let payload = Base64.decodeURL(jws.payloadSegment) else { throw VerificationError(.malformed, "JWS payload is not base64url") }
        evidence.payloadJSON = payload
        let signed = try Self.classify(payload)
        evidence.kind = signed.kind
        evidence.signed = signed
        let claimedEnvironment = Self.environmentClaim(signed)
        evidence.environment = claimedEnvironment.flatMap(Environment.init(claim:))
        let validationTime = validateAt ?? Self.signedDate(signed) ?? now

        // Header and chain, cached by the exact header bytes (alg + x5c).
        var key: [UInt8] = [0x4A]
        key.append(contentsOf: jws.headerSegment.utf8)
        let chain: ValidatedChain
        if let hit = chains.cached(key, at: validationTime) {
            chain = hit
        } else {
            chain = try await validateHeader(jws.headerSegment, at: validationTime)
            chains.remember(chain, key: key)
        }
        evidence.signing = SigningInfo(digest: "ES256", chain: chain.subjects, validatedAt: validationTime, anchorKind: chain.anchor.kind)

        // ES256 signature: raw r ‖ s.
        guard let signatureBytes = Base64.decodeURL(jws.signatureSegment), signatureBytes.count == 64,
            let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureBytes)
        else { throw VerificationError(.signatureInvalid, "JWS signature is not a 64-byte ES256 signature") }
        guard let key = P256.Signing.PublicKey(chain.leafKey) else {
            throw VerificationError(.unsupportedAlgorithm, "signing certificate key is not P-256")
        }
        guard key.isValidSignature(signature, for: SHA256.hash(data: Array(jws.signingInput.utf8))) else {
            throw VerificationError(.signatureInvalid, "JWS signature does not verify with \(chain.subjects.first ?? "the signer")")
        }

        // Policy: bundle, app Apple ID, environment.
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
        guard let environment = evidence.environment else {
            throw VerificationError(.environmentNotAllowed, "environment \(claimedEnvironment.map { "'\($0)'" } ?? "(absent)") is not recognised")
        }
        try checkEnvironment(environment, anchor: chain.anchor)

        // Notifications: every nested JWS is verified on its own and must agree.
        if case .notification(var notification) = signed {
            guard !nested else { throw VerificationError(.malformed, "notification nested in a notification") }
            if let inner = notification.data?.signedTransactionInfo {
                var nestedEvidence = Evidence()
                do { try await verifyJWS(inner, now: now, validateAt: validateAt, nested: true, into: &nestedEvidence) } catch {
                    throw VerificationError(error.code, "signedTransactionInfo: \(error.detail)")
                }
                guard case .transaction(let transaction) = nestedEvidence.signed else {
                    throw VerificationError(.malformed, "signedTransactionInfo is not a transaction")
                }
                guard nestedEvidence.environment == environment else {
                    throw VerificationError(
                        .environmentMismatch,
                        "signedTransactionInfo claims \(nestedEvidence.environment?.rawValue ?? "?"), notification \(environment.rawValue)")
                }
                notification.transaction = transaction
            }
            if let inner = notification.data?.signedRenewalInfo {
                var nestedEvidence = Evidence()
                do { try await verifyJWS(inner, now: now, validateAt: validateAt, nested: true, into: &nestedEvidence) } catch {
                    throw VerificationError(error.code, "signedRenewalInfo: \(error.detail)")
                }
                guard case .renewalInfo(let renewal) = nestedEvidence.signed else {
                    throw VerificationError(.malformed, "signedRenewalInfo is not renewal info")
                }
                guard nestedEvidence.environment == environment else {
                    throw VerificationError(
                        .environmentMismatch,
                        "signedRenewalInfo claims \(nestedEvidence.environment?.rawValue ?? "?"), notification \(environment.rawValue)")
                }
                notification.renewalInfo = renewal
            }
            evidence.signed = .notification(notification)
        }
    }

    private func checkAppAppleId(_ actual: Int64?) throws(VerificationError) {
        if let expected = configuration.appAppleId, let actual, actual != expected {
            throw VerificationError(.appAppleIdMismatch, "app Apple ID \(actual), expected \(expected)")
        }
    }

    private func validateHeader(_ segment: Substring, at time: Date) async throws(VerificationError) -> ValidatedChain {
        guard let headerBytes = Base64.decodeURL(segment) else { throw VerificationError(.malformed, "JWS header is not base64url") }
        let header: JWSHeader
        do { header = try JSONDecoder().decode(JWSHeader.self, from: Data(headerBytes)) } catch {
            throw VerificationError(.malformed, "JWS header is not a JSON object")
        }
        guard let alg = header.alg else { throw VerificationError(.unsupportedAlgorithm, "JWS header has no alg") }
        guard alg == "ES256" else { throw VerificationError(.unsupportedAlgorithm, "JWS alg \(alg.prefix(20)); only ES256 is accepted") }
        guard let x5c = header.x5c, !x5c.isEmpty else { throw VerificationError(.certificateChainMissing, "JWS header has no x5c chain") }
        var certificates: [(Certificate, [UInt8])] = []
        for encoded in x5c {
            guard let der = Base64.decode(encoded), let cert = try? Certificate(derEncoded: der) else {
                throw VerificationError(.malformed, "an x5c certificate does not parse")
            }
            certificates.append((cert, der))
        }
        switch certificates.count {
        case 1:
            // Only a configured direct-signing anchor (Xcode) may sign alone.
            return try await chains.validate(leaf: certificates[0].0, leafDER: certificates[0].1[...], intermediates: [], at: time)
        case 3:
            // x5c[2] is never trusted: the root comes from our configuration.
            return try await chains.validate(leaf: certificates[0].0, leafDER: certificates[0].1[...], intermediates: [certificates[1].0], at: time)
        default:
            throw VerificationError(.chainLengthInvalid, "x5c holds \(certificates.count) certificates; Apple's chain has 3")
        }
    }

    static func classify(_ payload: [UInt8]) throws(VerificationError) -> SignedPayload {
        let object: [String: Any]
        do {
            guard let parsed = try JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any] else {
                throw VerificationError(.malformed, "JWS payload is not a JSON object")
            }
            object = parsed
        } catch let error as VerificationError {
            throw error
        } catch {
            throw VerificationError(.malformed, "JWS payload is not JSON")
        }
        let decoder = JSONDecoder()
        do {
            if object["notificationType"] != nil {
                return .notification(try decoder.decode(SignedNotification.self, from: Data(payload)))
            }
            if object["transactionId"] == nil
                && (object["autoRenewProductId"] != nil || object["autoRenewStatus"] != nil || object["renewalDate"] != nil)
            {
                return .renewalInfo(try decoder.decode(SignedRenewalInfo.self, from: Data(payload)))
            }
            if object["transactionId"] == nil && (object["receiptType"] != nil || object["applicationVersion"] != nil) {
                return .appTransaction(try decoder.decode(SignedAppTransaction.self, from: Data(payload)))
            }
            return .transaction(try decoder.decode(SignedTransaction.self, from: Data(payload)))
        } catch {
            throw VerificationError(.malformed, "JWS payload field has the wrong type: \(error)")
        }
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
