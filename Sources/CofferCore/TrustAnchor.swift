import Crypto
import SwiftASN1
import X509

/// A certificate Coffer trusts, and the environments it may vouch for.
///
/// Build anchors with the factory methods; they enforce the environment rules:
/// - ``apple(_:allowSandbox:)``: Apple Root CA / G3 only (checked by fingerprint) →
///   Production, plus Sandbox when allowed. Apple marker OIDs are required.
/// - ``xcode(_:)``: Xcode's self-signed StoreKit signing certificate → Xcode only,
///   trusted directly (the receipt/JWS is signed by the anchor itself).
/// - ``cofferSandbox(_:)``: Coffer's own sandbox root → LocalTesting only, Apple OIDs required.
/// - ``custom(_:environments:requireAppleExtensions:)``: any other CA (e.g. a test CA);
///   it can never vouch for Production.
///
/// ```swift
/// let anchors = try [TrustAnchor.apple(AppleRoots.appleRootCA, allowSandbox: true)]
/// ```
public struct TrustAnchor: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable {
        case apple, xcode, cofferSandbox, custom
    }

    public let kind: Kind
    public let certificate: Certificate
    public let derBytes: [UInt8]
    public let environments: Set<Environment>
    /// Leaf must carry 1.2.840.113635.100.6.11.1, intermediate 1.2.840.113635.100.6.2.1.
    public let requiresAppleExtensions: Bool
    /// The anchor signs receipts/JWS itself (Xcode): a one-certificate chain equal to it is accepted.
    public let signsDirectly: Bool

    public struct ConfigurationError: Error, CustomStringConvertible, Sendable {
        public let description: String
    }

    private init(kind: Kind, der: [UInt8], environments: Set<Environment>, appleExtensions: Bool, direct: Bool) throws {
        guard let cert = try? Certificate(derEncoded: der) else {
            throw ConfigurationError(description: "trust anchor is not a DER X.509 certificate")
        }
        guard !environments.isEmpty else {
            throw ConfigurationError(description: "trust anchor \(cert.commonName ?? "?") vouches for no environment")
        }
        self.kind = kind
        self.certificate = cert
        self.derBytes = der
        self.environments = environments
        self.requiresAppleExtensions = appleExtensions
        self.signsDirectly = direct
    }

    /// One of Apple's root certificates. Throws if `der` is not Apple Root CA or Apple Root CA - G3.
    public static func apple(_ der: [UInt8], allowSandbox: Bool) throws -> TrustAnchor {
        guard AppleRoots.isAppleRoot(der) else {
            throw ConfigurationError(description: "certificate is not an Apple root (fingerprint mismatch)")
        }
        return try TrustAnchor(
            kind: .apple, der: der, environments: allowSandbox ? [.production, .sandbox] : [.production],
            appleExtensions: true, direct: false)
    }

    /// Both Apple roots (legacy receipts and StoreKit 2), as shipped in the binary.
    public static func appleRoots(allowSandbox: Bool) throws -> [TrustAnchor] {
        [try apple(AppleRoots.appleRootCA, allowSandbox: allowSandbox), try apple(AppleRoots.appleRootCAG3, allowSandbox: allowSandbox)]
    }

    /// Xcode's StoreKit testing certificate: vouches for the Xcode environment only.
    public static func xcode(_ der: [UInt8]) throws -> TrustAnchor {
        guard !AppleRoots.isAppleRoot(der) else {
            throw ConfigurationError(description: "an Apple root cannot vouch for Xcode data")
        }
        return try TrustAnchor(kind: .xcode, der: der, environments: [.xcode], appleExtensions: false, direct: true)
    }

    /// Coffer's own sandbox root: vouches for LocalTesting only.
    public static func cofferSandbox(_ der: [UInt8]) throws -> TrustAnchor {
        guard !AppleRoots.isAppleRoot(der) else {
            throw ConfigurationError(description: "an Apple root cannot be a sandbox root")
        }
        return try TrustAnchor(kind: .cofferSandbox, der: der, environments: [.localTesting], appleExtensions: true, direct: false)
    }

    /// Any other CA. It may never vouch for Production.
    /// - Parameter signsDirectly: also accept data signed by this certificate itself (as Xcode does).
    public static func custom(
        _ der: [UInt8], environments: Set<Environment>, requireAppleExtensions: Bool, signsDirectly: Bool = false
    ) throws -> TrustAnchor {
        guard !environments.contains(.production) else {
            throw ConfigurationError(description: "only Apple's roots may vouch for Production data")
        }
        guard !AppleRoots.isAppleRoot(der) else {
            throw ConfigurationError(description: "use TrustAnchor.apple for Apple's roots")
        }
        return try TrustAnchor(
            kind: .custom, der: der, environments: environments, appleExtensions: requireAppleExtensions, direct: signsDirectly)
    }
}

extension Certificate {
    /// The subject's first common name, if any.
    public var commonName: String? {
        for rdn in subject {
            for attribute in rdn where attribute.type == .RDNAttributeType.commonName {
                return attribute.value.description
            }
        }
        return nil
    }
}
