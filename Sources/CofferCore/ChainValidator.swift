import Foundation
import Synchronization
@_spi(DisableValidityCheck) import X509

/// A certificate chain that was validated against a configured ``TrustAnchor``.
struct ValidatedChain: Sendable {
    var anchor: TrustAnchor
    /// Subject common names, leaf first, root last.
    var subjects: [String]
    /// The chain itself, leaf first, anchor last.
    var certificates: [Certificate]
    var leafKey: Certificate.PublicKey
    /// The interval in which every certificate of the chain is valid.
    var validFrom: Date
    var validUntil: Date
}

/// Validates signing chains against the configured anchors, at a given time, and caches
/// the chains it has verified (keyed by the exact certificate bytes) so a steady stream of
/// receipts signed by the same Apple leaf costs one signature check each.
final class ChainValidator: Sendable {
    let anchors: [TrustAnchor]
    private let roots: CertificateStore
    private let cache = Mutex<[CacheKey: ValidatedChain]>([:])
    static let cacheCapacity = 256

    init(anchors: [TrustAnchor]) {
        self.anchors = anchors
        self.roots = CertificateStore(anchors.map(\.certificate))
    }

    func cached(_ key: CacheKey, at time: Date) -> ValidatedChain? {
        guard let hit = cache.withLock({ $0[key] }) else { return nil }
        return hit.validFrom <= time && time <= hit.validUntil ? hit : nil
    }

    func remember(_ chain: ValidatedChain, key: CacheKey) {
        cache.withLock { entries in
            if entries.count >= Self.cacheCapacity { entries.removeAll(keepingCapacity: true) }
            entries[key] = chain
        }
    }

    /// Validates `leaf` (with `intermediates` as untrusted helpers) at `time`.
    func validate(leaf: Certificate, leafDER: ArraySlice<UInt8>, intermediates: [Certificate], at time: Date) async throws(VerificationError)
        -> ValidatedChain
    {
        // Xcode-style anchors sign directly: the leaf *is* the anchor.
        if let direct = anchors.first(where: { $0.signsDirectly && $0.derBytes[...] == leafDER }) {
            try checkValidity([leaf], at: time)
            return chain([leaf], anchor: direct)
        }

        var verifier = Verifier(rootCertificates: roots) { RFC5280Policy.withValidityCheckDisabled() }
        let result = await verifier.validate(leaf: leaf, intermediates: CertificateStore(intermediates))
        guard case .validCertificate(let validated) = result else {
            if anchors.contains(where: { $0.signsDirectly }) && intermediates.isEmpty {
                throw VerificationError(.chainUntrusted, "signing certificate \(leaf.commonName ?? "?") is not a configured anchor")
            }
            throw VerificationError(.chainUntrusted, "no chain from \(leaf.commonName ?? "?") to a configured trust root")
        }
        let certificates = Array(validated)
        guard let root = certificates.last, let anchor = anchors.first(where: { $0.certificate == root }) else {
            throw VerificationError(.chainUntrusted, "chain ends at an unconfigured root")
        }
        try checkValidity(certificates, at: time)
        if isCA(leaf) {
            throw VerificationError(.chainUntrusted, "signing certificate \(leaf.commonName ?? "?") is a CA certificate")
        }
        if anchor.requiresAppleExtensions {
            guard certificates.count == 3 else {
                throw VerificationError(.chainUntrusted, "expected leaf → intermediate → root, got \(certificates.count) certificates")
            }
            guard certificates[0].extensions[oid: OID.appleReceiptSigningLeaf] != nil else {
                throw VerificationError(.missingAppleExtension, "leaf lacks 1.2.840.113635.100.6.11.1")
            }
            guard certificates[1].extensions[oid: OID.appleWWDRIntermediate] != nil else {
                throw VerificationError(.missingAppleExtension, "intermediate lacks 1.2.840.113635.100.6.2.1")
            }
        }
        return chain(certificates, anchor: anchor)
    }

    private func isCA(_ cert: Certificate) -> Bool {
        if case .isCertificateAuthority = try? cert.extensions.basicConstraints { return true }
        return false
    }

    private func checkValidity(_ certificates: [Certificate], at time: Date) throws(VerificationError) {
        for cert in certificates where !(cert.notValidBefore <= time && time <= cert.notValidAfter) {
            throw VerificationError(
                .certificateExpired,
                "\(cert.commonName ?? "certificate") valid \(RFC3339.format(cert.notValidBefore))–\(RFC3339.format(cert.notValidAfter)), checked at \(RFC3339.format(time))"
            )
        }
    }

    private func chain(_ certificates: [Certificate], anchor: TrustAnchor) -> ValidatedChain {
        let leaf = certificates[0]
        return ValidatedChain(
            anchor: anchor,
            subjects: certificates.map { $0.commonName ?? $0.subject.description },
            certificates: certificates,
            leafKey: leaf.publicKey,
            validFrom: certificates.map(\.notValidBefore).max() ?? leaf.notValidBefore,
            validUntil: certificates.map(\.notValidAfter).min() ?? leaf.notValidAfter)
    }
}

/// The exact bytes a verified chain came from (certificates, signer id or JWS header).
///
/// Equality is a `memcmp` of the whole key. The hash covers the length and five 64-byte
/// windows (start, quarters, end) rather than all ~4 KB: hashing and comparing the whole key
/// was 7% of a small receipt's verification. Collisions cost a compare, never a wrong
/// answer, and only validated chains are ever stored (at most `cacheCapacity`), so inputs
/// an attacker chooses cannot fill the table with colliding keys.
struct CacheKey: Hashable, Sendable {
    var bytes: [UInt8]

    init(_ parts: ArraySlice<UInt8>...) {
        bytes = []
        bytes.reserveCapacity(parts.reduce(0) { $0 + $1.count })
        for part in parts { bytes.append(contentsOf: part) }
    }

    static let window = 64

    func hash(into hasher: inout Hasher) {
        hasher.combine(bytes.count)
        bytes.withUnsafeBytes { all in
            guard all.count > Self.window * 5 else {
                hasher.combine(bytes: all)
                return
            }
            let last = all.count - Self.window
            for start in [0, last / 4, last / 2, last / 4 * 3, last] {
                hasher.combine(bytes: UnsafeRawBufferPointer(rebasing: all[start..<(start + Self.window)]))
            }
        }
    }

    static func == (lhs: CacheKey, rhs: CacheKey) -> Bool {
        guard lhs.bytes.count == rhs.bytes.count else { return false }
        return lhs.bytes.withUnsafeBytes { l in
            rhs.bytes.withUnsafeBytes { r in
                guard let a = l.baseAddress, let b = r.baseAddress else { return true }  // both empty
                return memcmp(a, b, l.count) == 0
            }
        }
    }
}
