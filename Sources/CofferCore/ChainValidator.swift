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

/// A certificate as received (receipt envelope, JWS `x5c`): its exact bytes, their raw shape
/// (checked by Coffer) and the parsed certificate (swift-certificates).
struct ReceivedCertificate {
    var der: ArraySlice<UInt8>
    var shape: CertificateShape
    var certificate: Certificate

    /// `configured`: byte for byte a trust anchor the operator gave (see ``CertificateShape``).
    init(_ der: ArraySlice<UInt8>, _ what: @autoclosure () -> String, configured: Bool = false) throws(VerificationError) {
        // Apple's certificates are 0.6–1.6 KB; a received one is parsed whole before any
        // signature is checked, and a 4 MiB one could hold a million ASN.1 elements.
        guard configured || der.count <= Self.maxBytes else {
            throw VerificationError(.limitExceeded, "\(what()) of \(der.count) bytes (at most \(Self.maxBytes))")
        }
        self.der = der
        do { shape = try CertificateShape(der, configured: configured) } catch { throw VerificationError(.malformed, "\(what()): \(error.detail)") }
        guard let certificate = try? Certificate(derEncoded: Array(der)) else {
            throw VerificationError(.malformed, "\(what()) does not parse")
        }
        self.certificate = certificate
    }

    /// Largest certificate accepted from a receipt or a JWS.
    static let maxBytes = 16 * 1024

    /// Its common name, else its subject, for error details: at most 200 characters.
    var name: String { String((certificate.commonName ?? certificate.subject.description).prefix(200)) }
}

/// Validates signing chains against the configured anchors, at a given time, and caches
/// the chains it has verified (keyed by the exact certificate bytes) so a steady stream of
/// receipts signed by the same Apple leaf costs one signature check each.
///
/// Two shapes only:
/// - **direct**: the signing certificate *is* an anchor marked `signsDirectly` (Xcode's
///   StoreKit certificates, byte for byte); see ``validateDirect(_:anchor:at:)``.
/// - **chain**: leaf → intermediates → a root anchor, built by swift-certificates. The leaf
///   is never a CA certificate and its key usage (when present) allows digitalSignature;
///   direct-signing anchors are never roots of chains.
final class ChainValidator: Sendable {
    let anchors: [TrustAnchor]
    /// Anchors that are roots of chains (every anchor but the direct-signing ones).
    private let chainAnchors: [TrustAnchor]
    private let chainAnchorShapes: [CertificateShape?]
    private let roots: CertificateStore
    private let cache = Mutex(Cache())
    static let cacheCapacity = 256

    /// A validated chain under its key, whether it was ever found again, and when it was last
    /// kept or found (a tick of ``Cache/clock``).
    struct CachedChain {
        var key: CacheKey
        var chain: ValidatedChain
        var found = false
        var used: UInt64
    }

    /// The validated chains, at most `cacheCapacity`, in buckets by their key's hash; a
    /// bucket holds at most `bucketCapacity`. One receipt can be re-encoded into hundreds of
    /// keys (certificate order, length forms), and a JWS header padded around a real Apple
    /// chain into as many as its length allows, each validated once: a full table drops the
    /// oldest entry never found again, so such a flood evicts only itself while a chain
    /// players keep presenting stays; when every entry was found again (the flood's keys each
    /// presented twice), the least recently used goes. O(capacity) once per miss on a full
    /// table, against a chain validation's milliseconds.
    ///
    /// The buckets bound what keys that share a hash cost: ``CacheKey`` hashes a few windows
    /// of its bytes, so keys that differ only between them (such padded headers) collide,
    /// and in one table of 256 they made every lookup compare each of them whole under the
    /// lock. A new key for a full bucket replaces that bucket's entry never found again, else
    /// its least recently used.
    struct Cache {
        var buckets: [Int: [CachedChain]] = [:]
        var count = 0
        var clock: UInt64 = 0
    }
    static let bucketCapacity = 4

    init(anchors: [TrustAnchor]) {
        self.anchors = anchors
        self.chainAnchors = anchors.filter { !$0.signsDirectly }
        self.chainAnchorShapes = chainAnchors.map { try? CertificateShape($0.derBytes[...], configured: true) }
        self.roots = CertificateStore(chainAnchors.map(\.certificate))
    }

    func cached(_ key: CacheKey, at time: Date) -> ValidatedChain? {
        let hash = key.hashValue
        let hit = cache.withLock { cache -> ValidatedChain? in
            // The marks are set in place, through the bucket's index.
            guard let bucket = cache.buckets.index(forKey: hash),
                let index = cache.buckets.values[bucket].firstIndex(where: { $0.key == key })
            else { return nil }
            cache.clock += 1
            cache.buckets.values[bucket][index].found = true
            cache.buckets.values[bucket][index].used = cache.clock
            return cache.buckets.values[bucket][index].chain
        }
        guard let hit else { return nil }
        return hit.validFrom <= time && time <= hit.validUntil ? hit : nil
    }

    func remember(_ chain: ValidatedChain, key: CacheKey) {
        let hash = key.hashValue
        cache.withLock { cache in
            cache.clock += 1
            let entry = CachedChain(key: key, chain: chain, used: cache.clock)
            if let bucket = cache.buckets.index(forKey: hash) {
                if let index = cache.buckets.values[bucket].firstIndex(where: { $0.key == key }) {
                    cache.buckets.values[bucket][index].chain = chain
                    cache.buckets.values[bucket][index].used = cache.clock
                    return
                }
                if cache.buckets.values[bucket].count >= Self.bucketCapacity {
                    if let victim = Self.victim(in: cache.buckets.values[bucket]) { cache.buckets.values[bucket][victim] = entry }
                    return
                }
            }
            if cache.count >= Self.cacheCapacity {
                // Never found again before found, then the oldest: one pass, no copy.
                var chosen: (bucket: Dictionary<Int, [CachedChain]>.Index, index: Int)?
                for bucket in cache.buckets.indices {
                    guard let index = Self.victim(in: cache.buckets.values[bucket]) else { continue }
                    if let current = chosen,
                        !Self.evictsBefore(cache.buckets.values[bucket][index], cache.buckets.values[current.bucket][current.index])
                    {
                        continue
                    }
                    chosen = (bucket, index)
                }
                if let chosen {
                    cache.buckets.values[chosen.bucket].remove(at: chosen.index)
                    if cache.buckets.values[chosen.bucket].isEmpty { cache.buckets.remove(at: chosen.bucket) }
                    cache.count -= 1
                }
            }
            cache.buckets[hash, default: []].append(entry)
            cache.count += 1
        }
    }

    /// Whether `a` goes before `b`: one never found again before one found, then the older.
    private static func evictsBefore(_ a: CachedChain, _ b: CachedChain) -> Bool {
        (a.found ? 1 : 0, a.used) < (b.found ? 1 : 0, b.used)
    }

    /// The entry of `bucket` to evict first.
    private static func victim(in bucket: [CachedChain]) -> Int? {
        bucket.indices.min { evictsBefore(bucket[$0], bucket[$1]) }
    }

    /// The direct-signing anchor that is exactly this certificate, if any.
    func directAnchor(for certificate: ReceivedCertificate) -> TrustAnchor? {
        anchors.first { $0.signsDirectly && $0.derBytes[...] == certificate.der }
    }

    /// The root anchor a JWS `x5c[2]` stands for: byte for byte the same certificate, or — for
    /// a non-Apple anchor — one with the same subject and public key (a re-issue of the same
    /// root, as in Apple's own library test vectors). Its bytes are never used beyond this:
    /// the chain is validated against the configured anchor.
    func chainAnchor(matching certificate: ReceivedCertificate) -> TrustAnchor? {
        if let exact = chainAnchors.first(where: { $0.derBytes[...] == certificate.der }) { return exact }
        for (anchor, shape) in zip(chainAnchors, chainAnchorShapes) where anchor.kind != .apple {
            guard let shape else { continue }
            if shape.subject.elementsEqual(certificate.shape.subject)
                && shape.subjectPublicKeyInfo.elementsEqual(certificate.shape.subjectPublicKeyInfo)
            {
                return anchor
            }
        }
        return nil
    }

    /// Data signed by a direct-signing anchor itself (`leaf` is the anchor's certificate).
    func validateDirect(_ leaf: ReceivedCertificate, anchor: TrustAnchor, at time: Date) throws(VerificationError) -> ValidatedChain {
        // TrustAnchor already refused direct anchors without digitalSignature or vouching for
        // more than Xcode; checked again here on a cache miss, for free.
        guard anchor.signsDirectly, anchor.environments == [.xcode], anchor.derBytes[...] == leaf.der,
            TrustAnchor.allowsDigitalSignature(leaf.certificate)
        else {
            throw VerificationError(.chainUntrusted, "\(leaf.name) may not sign directly")
        }
        try checkValidity([leaf.certificate], at: time)
        return chain([leaf.certificate], anchor: anchor)
    }

    /// A certificate a receipt or JWS carries, parsed; a copy of a configured anchor (a JWS's
    /// `x5c[2]`, a receipt's root) is the operator's, whatever its key size.
    func received(_ der: ArraySlice<UInt8>, _ what: @autoclosure () -> String) throws(VerificationError) -> ReceivedCertificate {
        try ReceivedCertificate(der, what(), configured: anchors.contains { $0.derBytes[...] == der })
    }

    /// The certificates a receipt carries besides its signer `leaf`, as the one path up from
    /// it: each one's issuer is the subject of exactly one of the rest (names compared as
    /// swift-certificates compares them), and every one is on the path. Handed a pool instead,
    /// swift-certificates' path builder tries every candidate issuer, checking a signature
    /// each time: certificates named alike that can issue each other made it try every
    /// ordering of them (13,699 RSA verifications for seven), for anyone who posts a receipt.
    static func path(from leaf: ReceivedCertificate, through others: [ReceivedCertificate]) throws(VerificationError) -> [ReceivedCertificate] {
        var rest = others
        var path: [ReceivedCertificate] = []
        var current = leaf
        while !rest.isEmpty {
            let issuers = rest.indices.filter { rest[$0].certificate.subject == current.certificate.issuer }
            guard issuers.count <= 1 else {
                throw VerificationError(.chainUntrusted, "\(issuers.count) certificates in the receipt could have issued \(current.name)")
            }
            guard let index = issuers.first else { break }
            current = rest.remove(at: index)
            path.append(current)
        }
        if let stray = rest.first {
            throw VerificationError(.chainUntrusted, "the receipt carries a certificate outside its chain: \(stray.name)")
        }
        return path
    }

    /// Validates `leaf` → `intermediates` (untrusted helpers) → one of `candidates` (by
    /// default every root anchor) at `time`.
    func validate(leaf: ReceivedCertificate, intermediates: [ReceivedCertificate], candidates: [TrustAnchor]? = nil, at time: Date)
        async throws(VerificationError) -> ValidatedChain
    {
        // A CA certificate never signs data: not Apple's roots or intermediates, not a root given
        // with --root, whatever the chain.
        guard !TrustAnchor.isCertificateAuthority(leaf.certificate) else {
            throw VerificationError(.chainUntrusted, "signing certificate \(leaf.name) is a CA certificate")
        }
        guard TrustAnchor.allowsDigitalSignature(leaf.certificate, requirePresent: false) else {
            throw VerificationError(.chainUntrusted, "signing certificate \(leaf.name) may not sign data (key usage)")
        }
        let allowed = candidates ?? chainAnchors
        let store = candidates.map { CertificateStore($0.map(\.certificate)) } ?? roots
        var verifier = Verifier(rootCertificates: store) { RFC5280Policy.withValidityCheckDisabled() }
        let result = await verifier.validate(leaf: leaf.certificate, intermediates: CertificateStore(intermediates.map(\.certificate)))
        guard case .validCertificate(let validated) = result else {
            if intermediates.isEmpty && anchors.contains(where: { $0.signsDirectly }) {
                throw VerificationError(.chainUntrusted, "signing certificate \(leaf.name) is not a configured anchor")
            }
            throw VerificationError(.chainUntrusted, "no chain from \(leaf.name) to a configured trust root")
        }
        let certificates = Array(validated)
        guard certificates.count >= 2, let root = certificates.last, let anchor = allowed.first(where: { $0.certificate == root }) else {
            throw VerificationError(.chainUntrusted, "chain from \(leaf.name) does not end at a configured root")
        }
        try checkValidity(certificates, at: time)
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

/// The DER facts Coffer checks itself on every certificate it receives, before
/// swift-certificates parses it, reading a dozen element headers in place:
/// - the outer signatureAlgorithm is byte for byte the signed `tbsCertificate.signature`
///   (RFC 5280 §4.1.1.2);
/// - the signatureValue and subjectPublicKey BIT STRINGs declare no unused bits.
///   swift-certificates ignores that count for RSA and ECDSA signatures, and the
///   signatureValue lies outside the signed bytes, so a certificate differing only there
///   would otherwise verify;
/// - one definite-length element, nothing after the signatureValue.
///
/// It also yields the raw issuer, serial number, subject and public key for exact comparisons
/// (receipt signer lookup, JWS root identity). Run on a chain-cache miss only.
struct CertificateShape {
    /// Encoded issuer Name.
    var issuer: ArraySlice<UInt8>
    /// serialNumber INTEGER content.
    var serial: ArraySlice<UInt8>
    /// Encoded subject Name.
    var subject: ArraySlice<UInt8>
    /// Encoded SubjectPublicKeyInfo.
    var subjectPublicKeyInfo: ArraySlice<UInt8>

    /// `configured`: a trust anchor the operator gave (`--root`), whose key size is theirs to
    /// choose — the size limit is for certificates anyone can post.
    init(_ der: ArraySlice<UInt8>, configured: Bool = false) throws(VerificationError) {
        var top = DERCursor(der)
        let certificate = try top.next(tag: 0x30, "certificate")
        guard top.isAtEnd, certificate.valueEnd == certificate.end else {
            throw VerificationError(.malformed, "certificate is not one definite-length element")
        }
        var parts = top.children(of: certificate)
        let tbs = try parts.next(tag: 0x30, "tbsCertificate")
        let algorithm = try parts.next(tag: 0x30, "certificate signatureAlgorithm")
        let signature = try parts.next(tag: 0x03, "certificate signatureValue")
        guard parts.isAtEnd else { throw VerificationError(.malformed, "certificate has fields after its signature") }
        try Self.checkNoUnusedBits(parts.value(signature), "certificate signatureValue")

        var fields = parts.children(of: tbs)
        if fields.optional(tagPeek: 0xA0) { _ = try fields.next() }
        serial = fields.value(try fields.next(tag: 0x02, "certificate serialNumber"))
        let signed = try fields.next(tag: 0x30, "tbsCertificate signature")
        guard fields.encoded(signed).elementsEqual(parts.encoded(algorithm)) else {
            throw VerificationError(.malformed, "certificate signatureAlgorithm differs from the signed one")
        }
        issuer = fields.encoded(try fields.next(tag: 0x30, "certificate issuer"))
        _ = try fields.next(tag: 0x30, "certificate validity")
        subject = fields.encoded(try fields.next(tag: 0x30, "certificate subject"))
        let keyInfo = try fields.next(tag: 0x30, "subjectPublicKeyInfo")
        subjectPublicKeyInfo = fields.encoded(keyInfo)
        var key = fields.children(of: keyInfo)
        let keyAlgorithm = try key.next(tag: 0x30, "subjectPublicKeyInfo algorithm")
        let keyBits = try key.next(tag: 0x03, "subjectPublicKey")
        guard key.isAtEnd else { throw VerificationError(.malformed, "subjectPublicKeyInfo has extra fields") }
        try Self.checkNoUnusedBits(key.value(keyBits), "subjectPublicKey")
        var algorithmFields = key.children(of: keyAlgorithm)
        if !configured, key.value(try algorithmFields.next(tag: 0x06, "subjectPublicKeyInfo algorithm")).elementsEqual(Self.rsaEncryption) {
            try Self.checkRSAKeySize(key.value(keyBits).dropFirst())
        }
    }

    /// rsaEncryption, 1.2.840.113549.1.1.1 (the OID's content bytes).
    static let rsaEncryption: [UInt8] = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x01]
    /// Apple's roots, intermediates and leaves hold 2048-bit RSA keys or ECDSA ones. BoringSSL
    /// verifies with RSA keys up to 16384 bits (one verification ~50 times a 2048-bit one's),
    /// and anyone can post a receipt carrying such keys.
    static let maximumRSABits = 4096

    /// An RSAPublicKey (RFC 8017 A.1.1) of at most ``maximumRSABits`` bits, its exponent at
    /// most 32 bits.
    private static func checkRSAKeySize(_ encoded: ArraySlice<UInt8>) throws(VerificationError) {
        var top = DERCursor(encoded)
        let sequence = try top.next(tag: 0x30, "RSAPublicKey")
        var parts = top.children(of: sequence)
        let modulus = parts.value(try parts.next(tag: 0x02, "RSA modulus")).drop(while: { $0 == 0 })
        let exponent = parts.value(try parts.next(tag: 0x02, "RSA exponent")).drop(while: { $0 == 0 })
        guard top.isAtEnd, parts.isAtEnd, let leading = modulus.first else {
            throw VerificationError(.malformed, "subjectPublicKey is not one RSAPublicKey")
        }
        let bits = modulus.count * 8 - leading.leadingZeroBitCount
        guard bits <= maximumRSABits else {
            throw VerificationError(.malformed, "a \(bits)-bit RSA key (at most \(maximumRSABits) bits are accepted)")
        }
        guard exponent.count <= 4 else { throw VerificationError(.malformed, "an RSA exponent over 32 bits") }
    }

    /// A BIT STRING holding whole bytes: the unused-bits count is 0 and there is content.
    private static func checkNoUnusedBits(_ content: ArraySlice<UInt8>, _ what: String) throws(VerificationError) {
        guard content.count >= 2, content.first == 0 else {
            throw VerificationError(.malformed, "\(what) is not a BIT STRING of whole bytes")
        }
    }
}

/// The exact bytes a verified chain came from (certificates, signer id or JWS header).
///
/// Equality is a `memcmp` of the whole key. The hash covers the length and five 64-byte
/// windows (start, quarters, end) rather than all ~4 KB: hashing and comparing the whole key
/// was 7% of a small receipt's verification. Collisions cost a compare, never a wrong
/// answer. Keys that differ only between the windows collide, and someone can make hundreds
/// that validate (a JWS header padded around a real chain): the cache keeps at most
/// ``ChainValidator/bucketCapacity`` keys of one hash.
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
