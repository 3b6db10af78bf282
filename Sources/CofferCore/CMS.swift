import SwiftASN1

/// DER content bytes of the object identifiers receipts use, compared without decoding.
enum OIDBytes {
    static let signedData: [UInt8] = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x02]  // 1.2.840.113549.1.7.2
    static let data: [UInt8] = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x01]  // 1.2.840.113549.1.7.1
    static let sha1: [UInt8] = [0x2B, 0x0E, 0x03, 0x02, 0x1A]  // 1.3.14.3.2.26
    static let sha256: [UInt8] = [0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01]  // 2.16.840.1.101.3.4.2.1
    static let sha384: [UInt8] = [0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x02]
    static let sha512: [UInt8] = [0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x03]
    static let rsaEncryption: [UInt8] = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x01]  // 1.2.840.113549.1.1.1
    static let sha1WithRSA: [UInt8] = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x05]
    static let sha256WithRSA: [UInt8] = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x0B]
    static let sha384WithRSA: [UInt8] = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x0C]
    static let sha512WithRSA: [UInt8] = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x0D]
    static let contentTypeAttribute: [UInt8] = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x09, 0x03]  // 1.2.840.113549.1.9.3
    static let messageDigestAttribute: [UInt8] = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x09, 0x04]  // 1.2.840.113549.1.9.4

    static func rsaSignatureDigest(_ oid: ArraySlice<UInt8>) -> DigestAlgorithm? {
        if oid.elementsEqual(sha1WithRSA) { return .sha1 }
        if oid.elementsEqual(sha256WithRSA) { return .sha256 }
        if oid.elementsEqual(sha384WithRSA) { return .sha384 }
        if oid.elementsEqual(sha512WithRSA) { return .sha512 }
        return nil
    }

    /// Dotted form of an encoded OID, for error messages.
    static func describe(_ encoded: ArraySlice<UInt8>) -> String {
        (try? ASN1ObjectIdentifier(derEncoded: Array(encoded))).map { "\($0)" } ?? "(invalid OID)"
    }

    static func describe(content: ArraySlice<UInt8>) -> String {
        describe(([0x06] + [UInt8(truncatingIfNeeded: min(content.count, 127))] + content.prefix(127))[...])
    }
}

/// Apple's marker extensions.
enum OID {
    /// Apple's marker on receipt and StoreKit signing leaves.
    static let appleReceiptSigningLeaf: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 11, 1]
    /// Apple's marker on WWDR intermediates.
    static let appleWWDRIntermediate: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 2, 1]
}

/// The digest a CMS signer used.
public enum DigestAlgorithm: String, Sendable, Hashable, Codable {
    case sha1, sha256, sha384, sha512

    init?(oidContent oid: ArraySlice<UInt8>) {
        if oid.elementsEqual(OIDBytes.sha1) {
            self = .sha1
        } else if oid.elementsEqual(OIDBytes.sha256) {
            self = .sha256
        } else if oid.elementsEqual(OIDBytes.sha384) {
            self = .sha384
        } else if oid.elementsEqual(OIDBytes.sha512) {
            self = .sha512
        } else {
            return nil
        }
    }
}

/// The parts of a PKCS#7 / CMS SignedData envelope that receipt verification needs.
/// Byte slices point into the caller's buffer; nothing is copied but the joined content.
struct SignedDataEnvelope {
    struct Signer {
        /// Encoded IssuerAndSerialNumber: the signer identifier.
        var sidEncoded: ArraySlice<UInt8>
        var issuerEncoded: ArraySlice<UInt8>
        var serialBytes: ArraySlice<UInt8>
        var digest: DigestAlgorithm
        /// Encoded `[0] IMPLICIT SET OF Attribute` when present.
        var signedAttributesEncoded: ArraySlice<UInt8>?
        var signature: ArraySlice<UInt8>
    }

    /// The signed receipt payload (eContent), chunks joined.
    var content: ArraySlice<UInt8>
    /// Each certificate's DER bytes, in envelope order.
    var certificates: [ArraySlice<UInt8>]
    /// The encoded certificates field, used as the chain-cache key.
    var certificatesEncoded: ArraySlice<UInt8>
    var signer: Signer
    /// Whether any indefinite length or constructed string was seen (BER rather than DER).
    var isBER: Bool

    /// Most certificates accepted in one envelope (Apple's carry 3, Xcode's 1).
    static let maxCertificates = 5

    /// Parses a ContentInfo holding SignedData, in DER or BER.
    ///
    /// Only the eContent is covered by the signature (and the signed attributes, when
    /// present); every other field is either checked to hold the one value Apple, Xcode and
    /// Coffer's sandbox write, or its bytes feed a check that any change fails. Field by field
    /// (RFC 5652 §5):
    ///
    /// | field | treatment |
    /// |---|---|
    /// | ContentInfo contentType | must be id-signedData |
    /// | SignedData version | must be 1 (issuerAndSerialNumber signers, id-data content: §5.1) |
    /// | digestAlgorithms | exactly one AlgorithmIdentifier: the signer's digest |
    /// | eContentType | must be id-data |
    /// | eContent | signed; BER chunking is joined, and chunk boundaries that move change the content |
    /// | certificates | each checked by ``CertificateShape`` and parsed; the signer is found by the exact issuer and serial bytes; every one must be part of the validated chain (its signature checked by its issuer, or byte-equal to the configured anchor); at most ``maxCertificates``; no duplicates |
    /// | crls | must be absent |
    /// | SignerInfo version | must be 1 |
    /// | sid | issuer bytes and serial bytes equal to a carried certificate's |
    /// | digestAlgorithm | SHA-1/SHA-2, parameters absent or NULL; the signature check uses it (PKCS #1 DigestInfo) |
    /// | signedAttrs | signed; contentType and messageDigest checked |
    /// | signatureAlgorithm | `rsaEncryption`, or `sha256/384/512WithRSAEncryption` naming the same digest (not `sha1WithRSAEncryption`: one bit from `rsaEncryption`, and no real receipt uses it) |
    /// | signature | verified |
    /// | unsignedAttrs | must be absent |
    /// | lengths, tags, trailing bytes | ``DERCursor/checkLimits(_:limits:)``: one root element, every length inside its container |
    ///
    /// AlgorithmIdentifier parameters may be absent or NULL (both are seen); no single bit
    /// flip turns one into the other.
    static func parse(_ bytes: [UInt8], limits: VerificationLimits) throws(VerificationError) -> SignedDataEnvelope {
        let isBER = try DERCursor.checkLimits(bytes[...], limits: limits)
        var top = DERCursor(bytes[...])
        let root = try top.next(tag: 0x30, "ContentInfo")
        var contentInfo = top.children(of: root)
        try expectOID(
            try contentInfo.next(tag: 0x06, "ContentInfo contentType"), OIDBytes.signedData, in: contentInfo, .unsupportedFormat, "ContentInfo type")
        var explicit = contentInfo.children(of: try contentInfo.next(tag: 0xA0, "[0] SignedData"))
        guard contentInfo.isAtEnd else { throw VerificationError(.malformed, "unexpected fields in ContentInfo") }
        let signedDataTLV = try explicit.next(tag: 0x30, "SignedData")
        guard explicit.isAtEnd else { throw VerificationError(.malformed, "[0] SignedData holds more than one element") }
        var fields = explicit.children(of: signedDataTLV)

        // Version 1: what Apple, Xcode and the sandbox write, and what RFC 5652 §5.1 requires
        // with issuerAndSerialNumber signers, id-data content and no attribute certificates.
        let version = fields.value(try fields.next(tag: 0x02, "SignedData version"))
        guard version.elementsEqual([1]) else {
            throw VerificationError(.unsupportedFormat, "SignedData version \(Array(version)) (1 expected)")
        }
        let digestAlgorithms = try fields.next(tag: 0x31, "SignedData digestAlgorithms")

        // encapContentInfo
        var encap = fields.children(of: try fields.next(tag: 0x30, "encapContentInfo"))
        try expectOID(try encap.next(tag: 0x06, "eContentType"), OIDBytes.data, in: encap, .unsupportedFormat, "eContentType")
        guard let eContentWrapper = try encap.optional(tag: 0xA0) else {
            throw VerificationError(.malformed, "receipt has no encapsulated content (detached signature)")
        }
        guard encap.isAtEnd else { throw VerificationError(.malformed, "unexpected fields in encapContentInfo") }
        var wrapper = encap.children(of: eContentWrapper)
        let eContent = try wrapper.next()
        guard wrapper.isAtEnd else { throw VerificationError(.malformed, "eContent wrapper holds more than one element") }
        let content = try wrapper.octetString(eContent, "eContent")

        // certificates [0] IMPLICIT (optional); crls [1] IMPLICIT must be absent.
        var certificates: [ArraySlice<UInt8>] = []
        var certificatesEncoded: ArraySlice<UInt8> = []
        if let certs = try fields.optional(tag: 0xA0) {
            certificatesEncoded = fields.encoded(certs)
            var list = fields.children(of: certs)
            while !list.isAtEnd {
                guard certificates.count < maxCertificates else {
                    throw VerificationError(.limitExceeded, "more than \(maxCertificates) certificates in the envelope")
                }
                certificates.append(list.encoded(try list.next(tag: 0x30, "certificate")))
            }
        }
        guard !fields.optional(tagPeek: 0xA1) else { throw VerificationError(.unsupportedFormat, "the envelope carries CRLs") }

        // signerInfos
        var signers = fields.children(of: try fields.next(tag: 0x31, "signerInfos"))
        guard fields.isAtEnd else { throw VerificationError(.malformed, "unexpected fields after signerInfos") }
        let signerTLV = try signers.next(tag: 0x30, "SignerInfo")
        guard signers.isAtEnd else { throw VerificationError(.unsupportedFormat, "receipt has several signers; exactly one is supported") }
        let signer = try parseSigner(signers.children(of: signerTLV))
        // digestAlgorithms declares exactly the signer's digest (nothing in the envelope goes unchecked).
        var declared = fields.children(of: digestAlgorithms)
        let only = DigestAlgorithm(oidContent: try algorithmOID(&declared, "SignedData digestAlgorithm"))
        guard declared.isAtEnd, only == signer.digest else {
            throw VerificationError(.malformed, "digestAlgorithms is not exactly the signer's \(signer.digest.rawValue)")
        }
        return SignedDataEnvelope(
            content: content, certificates: certificates, certificatesEncoded: certificatesEncoded,
            signer: signer, isBER: isBER || eContent.tag == 0x24)
    }

    private static func expectOID(
        _ tlv: TLV, _ expected: [UInt8], in cursor: DERCursor, _ code: VerificationError.Code, _ what: String
    ) throws(VerificationError) {
        guard cursor.value(tlv).elementsEqual(expected) else {
            throw VerificationError(code, "\(what) \(OIDBytes.describe(cursor.encoded(tlv))) is not the expected one")
        }
    }

    private static func parseSigner(_ cursor: DERCursor) throws(VerificationError) -> Signer {
        var fields = cursor
        guard fields.value(try fields.next(tag: 0x02, "SignerInfo version")).elementsEqual([1]) else {
            throw VerificationError(.unsupportedFormat, "SignerInfo version other than 1 (issuerAndSerialNumber)")
        }
        guard fields.optional(tagPeek: 0x30) else {
            throw VerificationError(.unsupportedFormat, "signer identified by subjectKeyIdentifier; issuerAndSerialNumber required")
        }
        let sid = try fields.next(tag: 0x30, "IssuerAndSerialNumber")
        var sidFields = fields.children(of: sid)
        let issuer = try sidFields.next(tag: 0x30, "signer issuer")
        let serial = try sidFields.next(tag: 0x02, "signer serial number")
        guard sidFields.isAtEnd else { throw VerificationError(.malformed, "IssuerAndSerialNumber has extra fields") }

        let digestOID = try algorithmOID(&fields, "SignerInfo digestAlgorithm")
        guard let digest = DigestAlgorithm(oidContent: digestOID) else {
            throw VerificationError(.unsupportedAlgorithm, "digest algorithm \(OIDBytes.describe(content: digestOID))")
        }
        let signedAttributes = try fields.optional(tag: 0xA0).map { fields.encoded($0) }
        let signatureOID = try algorithmOID(&fields, "SignerInfo signatureAlgorithm")
        let impliedDigest: DigestAlgorithm?
        if signatureOID.elementsEqual(OIDBytes.rsaEncryption) {
            impliedDigest = nil
        } else if let implied = OIDBytes.rsaSignatureDigest(signatureOID), implied != .sha1 {
            // sha1WithRSAEncryption is refused: it is one bit away from rsaEncryption, so
            // accepting both with SHA-1 would let an unsigned bit change; no receipt uses it.
            impliedDigest = implied
        } else {
            throw VerificationError(.unsupportedAlgorithm, "signature algorithm \(OIDBytes.describe(content: signatureOID))")
        }
        if let impliedDigest, impliedDigest != digest {
            throw VerificationError(.malformed, "signature algorithm contradicts digest \(digest.rawValue)")
        }
        // The signature is a primitive OCTET STRING (DER, even in Xcode's BER receipts).
        let signature = fields.value(try fields.next(tag: 0x04, "SignerInfo signature"))
        guard fields.isAtEnd else { throw VerificationError(.malformed, "unexpected fields in SignerInfo (unsigned attributes are not accepted)") }
        return Signer(
            sidEncoded: fields.encoded(sid), issuerEncoded: fields.encoded(issuer), serialBytes: fields.value(serial),
            digest: digest, signedAttributesEncoded: signedAttributes, signature: signature)
    }

    /// The OID content bytes of an AlgorithmIdentifier; parameters must be absent or NULL.
    private static func algorithmOID(_ cursor: inout DERCursor, _ what: String) throws(VerificationError) -> ArraySlice<UInt8> {
        var parts = cursor.children(of: try cursor.next(tag: 0x30, what))
        let oid = try parts.next(tag: 0x06, what)
        if !parts.isAtEnd {
            let parameters = try parts.next()
            guard parameters.tag == 0x05, parameters.valueStart == parameters.valueEnd, parts.isAtEnd else {
                throw VerificationError(.unsupportedAlgorithm, "\(what): parameters other than NULL")
            }
        }
        return parts.value(oid)
    }

    /// Checks the signed attributes (when present) and returns the bytes the signature covers:
    /// the DER signed-attributes SET re-tagged from `[0]` to `SET`; nil when there are none
    /// (the signature then covers the content itself).
    func signedBytes(contentDigest: [UInt8]) throws(VerificationError) -> [UInt8]? {
        guard let attributes = signer.signedAttributesEncoded else { return nil }
        let cursor = DERCursor(attributes)
        var top = cursor
        let outer = try top.next(tag: 0xA0, "signed attributes")
        guard top.isAtEnd, outer.valueEnd == outer.end else { throw VerificationError(.malformed, "signed attributes are not DER") }
        var items = cursor.children(of: outer)
        var sawDigest = false
        var sawContentType = false
        while !items.isAtEnd {
            var parts = items.children(of: try items.next(tag: 0x30, "signed attribute"))
            let oid = parts.value(try parts.next(tag: 0x06, "signed attribute type"))
            var values = parts.children(of: try parts.next(tag: 0x31, "signed attribute values"))
            if oid.elementsEqual(OIDBytes.messageDigestAttribute) {
                guard !sawDigest else { throw VerificationError(.malformed, "duplicate messageDigest attribute") }
                sawDigest = true
                let value = try values.next(tag: 0x04, "messageDigest")
                guard values.isAtEnd else { throw VerificationError(.malformed, "messageDigest has several values") }
                guard values.value(value).elementsEqual(contentDigest) else {
                    throw VerificationError(.signatureInvalid, "messageDigest attribute does not match the content digest")
                }
            } else if oid.elementsEqual(OIDBytes.contentTypeAttribute) {
                sawContentType = true
                let value = try values.next(tag: 0x06, "contentType")
                guard values.value(value).elementsEqual(OIDBytes.data) else {
                    throw VerificationError(.malformed, "contentType attribute is not id-data")
                }
            }
        }
        guard sawDigest, sawContentType else {
            throw VerificationError(.malformed, "signed attributes lack messageDigest or contentType")
        }
        var bytes = Array(attributes)
        bytes[0] = 0x31
        return bytes
    }
}

extension DERCursor {
    /// Whether the next element has this tag (nothing consumed).
    func optional(tagPeek tag: UInt8) -> Bool { position < end && bytes[position] == tag }
}
