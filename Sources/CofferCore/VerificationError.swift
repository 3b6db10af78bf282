/// Why a receipt or signed transaction was rejected.
///
/// Equality is by ``code`` only, so callers can match on the stable code while the
/// ``detail`` carries a human-readable explanation for logs and operators:
///
/// ```swift
/// if error == VerificationError(.bundleMismatch) { … }
/// ```
public struct VerificationError: Error, Hashable, Sendable, CustomStringConvertible {
    /// Stable, machine-readable reason codes. Their raw values appear in JSON output
    /// and HTTP problem bodies: never rename one.
    public enum Code: String, Sendable, CaseIterable, Codable {
        /// The bytes are not a well-formed PKCS#7 receipt or JWS.
        case malformed
        /// The input is some other format (e.g. an iOS 6 transaction receipt plist).
        case unsupportedFormat
        /// A signature or digest algorithm Coffer does not accept (`alg` other than ES256, …).
        case unsupportedAlgorithm
        /// A size, nesting-depth or element-count limit was exceeded.
        case limitExceeded
        /// The JWS header carries no `x5c` certificate chain.
        case certificateChainMissing
        /// The `x5c` chain does not have the expected number of certificates.
        case chainLengthInvalid
        /// No certificate in the receipt matches the SignerInfo's issuer and serial number.
        case signerNotFound
        /// The signature over the content (or a signed-attribute digest) does not verify.
        case signatureInvalid
        /// The certificates do not chain to a configured trust root.
        case chainUntrusted
        /// A certificate in the chain was not valid at the validation time.
        case certificateExpired
        /// An Apple marker extension (leaf 1.2.840.113635.100.6.11.1, intermediate …6.2.1) is missing.
        case missingAppleExtension
        /// The bundle identifier is not one this verifier is configured for.
        case bundleMismatch
        /// The app Apple ID differs from the configured one.
        case appAppleIdMismatch
        /// The claimed environment is not one the trust root may vouch for.
        case environmentNotAllowed
        /// A nested JWS claims a different environment than its notification.
        case environmentMismatch
        /// The receipt's SHA-1 hash does not match the given device identifier.
        case deviceMismatch
    }

    public var code: Code
    public var detail: String

    public init(_ code: Code, _ detail: String = "") {
        self.code = code
        self.detail = detail
    }

    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.code == rhs.code }
    public func hash(into hasher: inout Hasher) { hasher.combine(code) }

    public var description: String { detail.isEmpty ? code.rawValue : "\(code.rawValue): \(detail)" }
}
