import CofferCore
import Crypto
import Foundation
import SwiftASN1
import X509
import _CryptoExtras

/// Coffer's own StoreKit testing CA, shaped like Apple's: a root, an intermediate carrying
/// 1.2.840.113635.100.6.2.1, and two leaves carrying 1.2.840.113635.100.6.11.1 — an RSA
/// one that signs legacy receipts and a P-256 one that signs JWS.
///
/// It is never trusted unless configured (``CofferCore/TrustAnchor/cofferSandbox(_:)``), and
/// then only for the LocalTesting environment.
///
/// ```swift
/// let ca = try SandboxCA.create(now: .now)
/// let receipt = try ca.mintReceipt(ReceiptSpec(bundleId: "com.example.game", purchases: [
///     PurchaseSpec(productId: "level.pack.1", transactionId: "1000")]))
/// ```
public struct SandboxCA: Sendable {
    public var root: Certificate
    public var intermediate: Certificate
    public var receiptSigner: Certificate
    public var jwsSigner: Certificate
    var rootKey: P256.Signing.PrivateKey
    var intermediateKey: P256.Signing.PrivateKey
    var receiptKey: _RSA.Signing.PrivateKey
    var jwsKey: P256.Signing.PrivateKey

    /// Test knobs for minting deliberately broken CAs. Production code never sets them.
    public struct Options: Sendable {
        public var validFrom: Date?
        public var validFor: TimeInterval = 10 * 365 * 86400
        public var leafAppleExtension = true
        public var intermediateAppleExtension = true
        public var commonNamePrefix = "Coffer Sandbox"
        /// Derive the P-256 keys and the serial numbers from this seed (reproducible tests).
        /// The RSA receipt key stays random (swift-crypto cannot derive one), and ECDSA
        /// signatures use random nonces, so certificate bytes still differ between runs.
        public var seed: UInt64?
        /// Negative fixture: both signing leaves claim basicConstraints cA=TRUE.
        public var leavesAreCAs = false
        /// Negative fixture: the JWS leaf is issued by the root itself (skipping the
        /// intermediate), so a chain can be built around the intermediate x5c carries.
        public var jwsLeafIssuedByRoot = false
        public init() {}
    }

    /// A P-256 key and a serial number derived from `seed` and `label`, or random ones.
    static func keyAndSerial(_ seed: UInt64?, _ label: String) -> (P256.Signing.PrivateKey, Certificate.SerialNumber) {
        guard let seed else { return (P256.Signing.PrivateKey(), Certificate.SerialNumber()) }
        func derive(_ purpose: String, _ counter: Int) -> [UInt8] {
            var hash = SHA256()
            withUnsafeBytes(of: seed.bigEndian) { hash.update(bufferPointer: $0) }
            hash.update(data: Array("\(label)/\(purpose)/\(counter)".utf8))
            return Array(hash.finalize())
        }
        var counter = 0
        // A hash output is a valid P-256 scalar except with probability ~2^-32: try the next.
        while true {
            if let key = try? P256.Signing.PrivateKey(rawRepresentation: derive("key", counter)) {
                var serial = Array(derive("serial", counter).prefix(16))
                serial[0] = (serial[0] & 0x7F) | 0x01  // positive and non-zero
                return (key, Certificate.SerialNumber(bytes: serial))
            }
            counter += 1
        }
    }

    public static func create(now: Date, options: Options = .init()) throws -> SandboxCA {
        let notBefore = options.validFrom ?? now.addingTimeInterval(-86400)
        let notAfter = notBefore.addingTimeInterval(options.validFor)
        let (rootKey, rootSerial) = keyAndSerial(options.seed, "root")
        let (intermediateKey, intermediateSerial) = keyAndSerial(options.seed, "intermediate")
        let receiptKey = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let (jwsKey, jwsSerial) = keyAndSerial(options.seed, "jws")
        let (_, receiptSerial) = keyAndSerial(options.seed, "receipt")
        let rootName = try DistinguishedName {
            CommonName("\(options.commonNamePrefix) Root CA")
            OrganizationName("Coffer")
        }
        let intermediateName = try DistinguishedName {
            CommonName("\(options.commonNamePrefix) Developer Relations CA")
            OrganizationName("Coffer")
        }
        let root = try Certificate(
            version: .v3, serialNumber: rootSerial, publicKey: .init(rootKey.publicKey),
            notValidBefore: notBefore, notValidAfter: notAfter.addingTimeInterval(86400),
            issuer: rootName, subject: rootName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions([
                Certificate.Extension(BasicConstraints.isCertificateAuthority(maxPathLength: nil), critical: true),
                Certificate.Extension(KeyUsage(keyCertSign: true, cRLSign: true), critical: true),
            ]),
            issuerPrivateKey: .init(rootKey))
        var intermediateExtensions = [
            try Certificate.Extension(BasicConstraints.isCertificateAuthority(maxPathLength: 0), critical: true),
            try Certificate.Extension(KeyUsage(keyCertSign: true, cRLSign: true), critical: true),
        ]
        if options.intermediateAppleExtension {
            intermediateExtensions.append(Certificate.Extension(oid: [1, 2, 840, 113635, 100, 6, 2, 1], critical: false, value: [0x05, 0x00]))
        }
        let intermediate = try Certificate(
            version: .v3, serialNumber: intermediateSerial, publicKey: .init(intermediateKey.publicKey),
            notValidBefore: notBefore, notValidAfter: notAfter.addingTimeInterval(3600),
            issuer: rootName, subject: intermediateName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions(intermediateExtensions),
            issuerPrivateKey: .init(rootKey))
        func leaf(_ name: String, _ key: Certificate.PublicKey, serial: Certificate.SerialNumber, byRoot: Bool = false) throws -> Certificate {
            try Self.leaf(
                name, key, serial: serial, issuer: byRoot ? rootName : intermediateName, issuerKey: byRoot ? rootKey : intermediateKey,
                validity: (notBefore, notAfter), options: options)
        }
        return SandboxCA(
            root: root, intermediate: intermediate,
            receiptSigner: try leaf("Receipt Signing", .init(receiptKey.publicKey), serial: receiptSerial),
            jwsSigner: try leaf("StoreKit Signing", .init(jwsKey.publicKey), serial: jwsSerial, byRoot: options.jwsLeafIssuedByRoot),
            rootKey: rootKey, intermediateKey: intermediateKey, receiptKey: receiptKey, jwsKey: jwsKey)
    }

    /// A leaf certificate for `name` (digital signature only, unless the options make leaves CAs).
    static func leaf(
        _ name: String, _ key: Certificate.PublicKey, serial: Certificate.SerialNumber, issuer: DistinguishedName,
        issuerKey: P256.Signing.PrivateKey, validity: (notBefore: Date, notAfter: Date), options: Options
    ) throws -> Certificate {
        var extensions = [
            try Certificate.Extension(
                options.leavesAreCAs ? BasicConstraints.isCertificateAuthority(maxPathLength: nil) : BasicConstraints.notCertificateAuthority,
                critical: true),
            try Certificate.Extension(KeyUsage(digitalSignature: true), critical: true),
        ]
        if options.leafAppleExtension {
            extensions.append(Certificate.Extension(oid: [1, 2, 840, 113635, 100, 6, 11, 1], critical: false, value: [0x05, 0x00]))
        }
        return try Certificate(
            version: .v3, serialNumber: serial, publicKey: key,
            notValidBefore: validity.notBefore, notValidAfter: validity.notAfter, issuer: issuer,
            subject: try DistinguishedName {
                CommonName("\(options.commonNamePrefix) \(name)")
                OrganizationName("Coffer")
            },
            signatureAlgorithm: .ecdsaWithSHA256, extensions: try Certificate.Extensions(extensions), issuerPrivateKey: .init(issuerKey))
    }

    /// DER bytes of the root certificate: what a verifier is configured to trust.
    public var rootDER: [UInt8] { (try? Self.der(root)) ?? [] }

    /// The trust anchor for this CA (LocalTesting only).
    public func anchor() throws -> TrustAnchor { try TrustAnchor.cofferSandbox(Self.der(root)) }

    /// DER bytes of any certificate (e.g. ``receiptSigner``), for tests that patch them.
    public static func derBytes(of certificate: Certificate) throws -> [UInt8] { try der(certificate) }

    static func der(_ certificate: Certificate) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        return serializer.serializedBytes
    }

    // MARK: Files

    /// File names inside a sandbox directory.
    public enum FileName {
        public static let root = "root.pem"
        public static let rootDER = "root.cer"
        public static let rootKey = "root-key.pem"
        public static let intermediate = "intermediate.pem"
        public static let intermediateKey = "intermediate-key.pem"
        public static let receiptSigner = "receipt-signer.pem"
        public static let receiptKey = "receipt-signer-key.pem"
        public static let jwsSigner = "jws-signer.pem"
        public static let jwsKey = "jws-signer-key.pem"
    }

    /// The CA as named files (PEM, plus the root as DER). Keys are PKCS#8 PEM.
    public func files() throws -> [String: [UInt8]] {
        func pem(_ c: Certificate) throws -> [UInt8] { Array(try c.serializeAsPEM().pemString.utf8) + [0x0A] }
        return [
            FileName.root: try pem(root),
            FileName.rootDER: try Self.der(root),
            FileName.rootKey: Array(rootKey.pemRepresentation.utf8) + [0x0A],
            FileName.intermediate: try pem(intermediate),
            FileName.intermediateKey: Array(intermediateKey.pemRepresentation.utf8) + [0x0A],
            FileName.receiptSigner: try pem(receiptSigner),
            FileName.receiptKey: Array(receiptKey.pemRepresentation.utf8) + [0x0A],
            FileName.jwsSigner: try pem(jwsSigner),
            FileName.jwsKey: Array(jwsKey.pemRepresentation.utf8) + [0x0A],
        ]
    }

    public struct LoadError: Error, CustomStringConvertible {
        public var description: String
    }

    /// Loads a CA written by ``files()``; `read` returns a file's bytes by name.
    public static func load(_ read: (String) throws -> [UInt8]) throws -> SandboxCA {
        func text(_ name: String) throws -> String {
            guard let s = String(validating: try read(name), as: UTF8.self) else { throw LoadError(description: "\(name) is not text") }
            return s
        }
        do {
            return SandboxCA(
                root: try Certificate(pemEncoded: text(FileName.root)),
                intermediate: try Certificate(pemEncoded: text(FileName.intermediate)),
                receiptSigner: try Certificate(pemEncoded: text(FileName.receiptSigner)),
                jwsSigner: try Certificate(pemEncoded: text(FileName.jwsSigner)),
                rootKey: try P256.Signing.PrivateKey(pemRepresentation: text(FileName.rootKey)),
                intermediateKey: try P256.Signing.PrivateKey(pemRepresentation: text(FileName.intermediateKey)),
                receiptKey: try _RSA.Signing.PrivateKey(pemRepresentation: text(FileName.receiptKey)),
                jwsKey: try P256.Signing.PrivateKey(pemRepresentation: text(FileName.jwsKey)))
        } catch let error as LoadError {
            throw error
        } catch {
            throw LoadError(description: "sandbox CA files do not load: \(error)")
        }
    }
}
