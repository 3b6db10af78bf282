import Crypto
import SwiftASN1
import X509

/// A certificate Coffer trusts, and the environments it may vouch for.
///
/// Build anchors with the factory methods; they enforce the environment rules:
/// - ``apple(_:allowSandbox:)`` / ``apple(_:environments:)``: Apple Root CA / G3 only
///   (checked by fingerprint) → Production and/or Sandbox. Apple marker OIDs are required.
/// - ``xcode(_:)``: Xcode's self-signed StoreKit signing certificate → Xcode only,
///   trusted directly (the receipt/JWS is signed by the anchor itself).
/// - ``cofferSandbox(_:)``: Coffer's own sandbox root → LocalTesting only, Apple OIDs required.
/// - ``custom(_:environments:requireAppleExtensions:signsDirectly:)``: any other CA (e.g. a
///   test CA); it can never vouch for Production.
/// - ``anchors(for:environments:)``: the `--root` / `--environment` rules of the command line.
///
/// An anchor that signs directly (its own certificate is the signing certificate) vouches for
/// Xcode only, and its key usage must allow `digitalSignature`: a CA root that only signs
/// certificates (Apple's, Coffer's sandbox root) can never sign receipts or JWS itself.
///
/// ```swift
/// let anchors = try [TrustAnchor.apple(AppleRoots.appleRootCA, allowSandbox: false)]
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
        guard let cert = try? Certificate(derEncoded: der), (try? CertificateShape(der[...], configured: true)) != nil else {
            throw ConfigurationError(description: "trust anchor is not a DER X.509 certificate")
        }
        guard !environments.isEmpty else {
            throw ConfigurationError(description: "trust anchor \(cert.commonName ?? "?") vouches for no environment")
        }
        if direct {
            guard environments == [.xcode] else {
                throw ConfigurationError(
                    description: "\(cert.commonName ?? "a certificate") signs directly, so it may vouch for Xcode data only")
            }
            guard Self.allowsDigitalSignature(cert) else {
                throw ConfigurationError(
                    description: "\(cert.commonName ?? "a certificate") cannot sign directly: its key usage does not include digitalSignature")
            }
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
        try apple(der, environments: allowSandbox ? [.production, .sandbox] : [.production])
    }

    /// One of Apple's root certificates, vouching for exactly `environments` (a non-empty
    /// subset of Production and Sandbox: e.g. `[.sandbox]` for a staging server).
    public static func apple(_ der: [UInt8], environments: Set<Environment>) throws -> TrustAnchor {
        guard AppleRoots.isAppleRoot(der) else {
            throw ConfigurationError(description: "certificate is not an Apple root (fingerprint mismatch)")
        }
        guard environments.isSubset(of: [.production, .sandbox]) else {
            throw ConfigurationError(description: "Apple's roots vouch only for Production and Sandbox data")
        }
        return try TrustAnchor(kind: .apple, der: der, environments: environments, appleExtensions: true, direct: false)
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
    /// - Parameter signsDirectly: also accept data signed by this certificate itself (as Xcode
    ///   does). Only for a certificate whose key usage includes digitalSignature, vouching for
    ///   Xcode only.
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

extension TrustAnchor {
    /// Whether `certificate` may sign data (not only certificates): its key usage, when
    /// present, includes digitalSignature. A key usage that does not parse counts as no.
    /// - Parameter requirePresent: demand the key usage extension (for certificates that sign
    ///   directly); without it an absent key usage allows everything (RFC 5280 §4.2.1.3).
    static func allowsDigitalSignature(_ certificate: Certificate, requirePresent: Bool = true) -> Bool {
        do {
            guard let usage = try certificate.extensions.keyUsage else { return !requirePresent }
            return usage.digitalSignature
        } catch {
            return false
        }
    }

    /// Whether `certificate` claims to be a CA (basicConstraints cA=TRUE). A basicConstraints
    /// extension that does not parse counts as a CA (fail closed).
    static func isCertificateAuthority(_ certificate: Certificate) -> Bool {
        do {
            if case .isCertificateAuthority = try certificate.extensions.basicConstraints { return true }
            return false
        } catch {
            return true
        }
    }
}

/// One configured trust root (`--root [ENV=]FILE`, `COFFER_ROOTS`, `roots` in the config
/// file): the certificate, and the one environment it was scoped to, if any.
public struct ConfiguredRoot: Sendable, Hashable {
    public var scope: Environment?
    public var der: [UInt8]
    /// Where it came from (a path), for messages.
    public var name: String

    public init(scope: Environment?, der: [UInt8], name: String) {
        self.scope = scope
        self.der = der
        self.name = name
    }

    /// Splits `ENV=PATH` into its scope and path. The text before the first `=` is a scope only
    /// when it names an environment (`Production`, `Sandbox`, `Xcode`, `LocalTesting`, any
    /// case); otherwise the whole argument is the path, `=` and all (`./Sandbox=a.pem` is a path).
    ///
    /// ```swift
    /// ConfiguredRoot.parse("sandbox=/etc/coffer/ca.pem")  // (.sandbox, "/etc/coffer/ca.pem")
    /// ConfiguredRoot.parse("/tmp/a=b.pem")                 // (nil, "/tmp/a=b.pem")
    /// ```
    public static func parse(_ argument: String) -> (scope: Environment?, path: String) {
        guard let equals = argument.firstIndex(of: "=") else { return (nil, argument) }
        let prefix = argument[..<equals].lowercased()
        guard let scope = Environment.allCases.first(where: { $0.rawValue.lowercased() == prefix }) else { return (nil, argument) }
        return (scope, String(argument[argument.index(after: equals)...]))
    }
}

extension TrustAnchor {
    /// The anchors for configured roots and accepted environments: the rules of `--root` and
    /// `--environment`.
    ///
    /// - No roots: Apple's two built-in roots.
    /// - An Apple root (by fingerprint) vouches for Production only, unless `environments`
    ///   names Sandbox (then for the named ones of Production and Sandbox), or it is scoped
    ///   (`Sandbox=FILE`, `Production=FILE`). It never vouches for Xcode or LocalTesting.
    /// - Any other root vouches for LocalTesting only, unless scoped (`Sandbox=FILE`,
    ///   `Xcode=FILE`, `LocalTesting=FILE`); never for Production. Scoped to Xcode, a
    ///   self-issued certificate whose key usage includes digitalSignature (Xcode's StoreKit
    ///   certificate) signs directly; any other one is a CA whose chains are checked as Apple's.
    /// - A non-empty `environments` is the list of accepted environments: each root vouches
    ///   for what it offers *and* is accepted; a root left with nothing, or an accepted
    ///   environment no root vouches for, is a configuration error. The same certificate named
    ///   several times vouches for the union of its scopes.
    ///
    /// ```swift
    /// // coffer serve --root Sandbox=staging-ca.pem --root LocalTesting=staging-ca.pem
    /// let der = try Array(Data(contentsOf: URL(fileURLWithPath: "staging-ca.cer")))
    /// let anchors = try TrustAnchor.anchors(
    ///     for: [ConfiguredRoot(scope: .sandbox, der: der, name: "staging-ca.cer"),
    ///           ConfiguredRoot(scope: .localTesting, der: der, name: "staging-ca.cer")],
    ///     environments: [])  // one anchor vouching for Sandbox and LocalTesting
    /// ```
    public static func anchors(for roots: [ConfiguredRoot], environments requested: Set<Environment>) throws -> [TrustAnchor] {
        let builtIn = roots.isEmpty
        let configured =
            builtIn
            ? [
                ConfiguredRoot(scope: nil, der: AppleRoots.appleRootCA, name: "Apple Root CA (built in)"),
                ConfiguredRoot(scope: nil, der: AppleRoots.appleRootCAG3, name: "Apple Root CA - G3 (built in)"),
            ] : roots
        var order: [[UInt8]] = []
        var vouched: [[UInt8]: (name: String, environments: Set<Environment>)] = [:]
        for root in configured {
            let offered = try offered(by: root, requested: requested)
            let environments = requested.isEmpty ? offered : offered.intersection(requested)
            if environments.isEmpty {
                if builtIn { continue }
                let accepted = requested.sorted().map(\.rawValue).joined(separator: ", ")
                let hint =
                    root.scope == nil && !AppleRoots.isAppleRoot(root.der)
                    ? " (a non-Apple root vouches for LocalTesting only; scope it, e.g. Sandbox=\(root.name))" : ""
                throw ConfigurationError(
                    description:
                        "\(root.name) vouches for \(offered.sorted().map(\.rawValue).joined(separator: ", ")), none of the accepted \(accepted)\(hint)"
                )
            }
            if let existing = vouched[root.der] {
                vouched[root.der] = (existing.name, existing.environments.union(environments))
            } else {
                order.append(root.der)
                vouched[root.der] = (root.name, environments)
            }
        }
        try checkCovered(requested, by: vouched.values.reduce(into: Set<Environment>()) { $0.formUnion($1.environments) })
        let anchors = try order.compactMap { der in try vouched[der].map { try anchor(der, name: $0.name, environments: $0.environments) } }
        guard !anchors.isEmpty else { throw ConfigurationError(description: "no trust root can vouch for the accepted environments") }
        return anchors
    }

    /// The environments a configured root may vouch for: its scope (Production for Apple's
    /// roots only), or by default Production (and Sandbox when asked for) for Apple's roots
    /// and LocalTesting for any other.
    static func offered(by root: ConfiguredRoot, requested: Set<Environment>) throws -> Set<Environment> {
        switch (root.scope, AppleRoots.isAppleRoot(root.der)) {
        case (.some(let scope), true):
            guard scope == .production || scope == .sandbox else {
                throw ConfigurationError(description: "\(root.name): Apple's roots vouch only for Production and Sandbox data, not \(scope.rawValue)")
            }
            return [scope]
        case (.some(let scope), false):
            guard scope != .production else {
                throw ConfigurationError(description: "\(root.name): only Apple's roots may vouch for Production data")
            }
            return [scope]
        case (nil, true): return requested.isEmpty ? [.production] : [.production, .sandbox]
        case (nil, false): return [.localTesting]
        }
    }

    /// Every requested environment must have a root, or configuration fails naming what would give one.
    static func checkCovered(_ requested: Set<Environment>, by covered: Set<Environment>) throws {
        guard let missing = requested.subtracting(covered).sorted().first else { return }
        let why: String
        switch missing {
        case .production: why = "only Apple's roots may"
        case .sandbox: why = "Apple's roots, or a root given as Sandbox=FILE"
        case .xcode: why = "give Xcode's StoreKit certificate as Xcode=FILE"
        case .localTesting: why = "give Coffer's sandbox root as --root FILE"
        }
        throw ConfigurationError(description: "no configured root vouches for \(missing.rawValue) (\(why))")
    }

    /// The anchor for one root certificate and the environments it vouches for.
    static func anchor(_ der: [UInt8], name: String, environments: Set<Environment>) throws -> TrustAnchor {
        if AppleRoots.isAppleRoot(der) { return try .apple(der, environments: environments) }
        guard let certificate = try? Certificate(derEncoded: der) else {
            throw ConfigurationError(description: "\(name) is not a DER X.509 certificate")
        }
        let signsItself = certificate.subject == certificate.issuer && allowsDigitalSignature(certificate)
        guard environments.contains(.xcode) && signsItself else {
            return try .custom(der, environments: environments, requireAppleExtensions: true)
        }
        guard environments == [.xcode] else {
            throw ConfigurationError(description: "\(name) signs directly (like Xcode's StoreKit certificate), so it may vouch for Xcode only")
        }
        return try .xcode(der)
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
