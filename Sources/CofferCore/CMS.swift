import SwiftASN1

/// Object identifiers used by Apple receipts and CMS.
enum OID {
    static let signedData: ASN1ObjectIdentifier = [1, 2, 840, 113549, 1, 7, 2]
    static let data: ASN1ObjectIdentifier = [1, 2, 840, 113549, 1, 7, 1]
    static let sha1: ASN1ObjectIdentifier = [1, 3, 14, 3, 2, 26]
    static let sha256: ASN1ObjectIdentifier = [2, 16, 840, 1, 101, 3, 4, 2, 1]
    static let sha384: ASN1ObjectIdentifier = [2, 16, 840, 1, 101, 3, 4, 2, 2]
    static let sha512: ASN1ObjectIdentifier = [2, 16, 840, 1, 101, 3, 4, 2, 3]
    static let rsaEncryption: ASN1ObjectIdentifier = [1, 2, 840, 113549, 1, 1, 1]
    static let sha1WithRSA: ASN1ObjectIdentifier = [1, 2, 840, 113549, 1, 1, 5]
    static let sha256WithRSA: ASN1ObjectIdentifier = [1, 2, 840, 113549, 1, 1, 11]
    static let sha384WithRSA: ASN1ObjectIdentifier = [1, 2, 840, 113549, 1, 1, 12]
    static let sha512WithRSA: ASN1ObjectIdentifier = [1, 2, 840, 113549, 1, 1, 13]
    static let contentTypeAttribute: ASN1ObjectIdentifier = [1, 2, 840, 113549, 1, 9, 3]
    static let messageDigestAttribute: ASN1ObjectIdentifier = [1, 2, 840, 113549, 1, 9, 4]
    /// Apple's marker on receipt and StoreKit signing leaves.
    static let appleReceiptSigningLeaf: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 11, 1]
    /// Apple's marker on WWDR intermediates.
    static let appleWWDRIntermediate: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 2, 1]
}

/// The digest a CMS signer used.
public enum DigestAlgorithm: String, Sendable, Hashable, Codable {
    case sha1, sha256, sha384, sha512

    init?(oid: ASN1ObjectIdentifier) {
        switch oid {
        case OID.sha1: self = .sha1
        case OID.sha256: self = .sha256
        case OID.sha384: self = .sha384
        case OID.sha512: self = .sha512
        default: return nil
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

    static let context0 = ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific)
    static let context1 = ASN1Identifier(tagWithNumber: 1, tagClass: .contextSpecific)

    /// Parses a ContentInfo holding SignedData, in DER or BER.
    static func parse(_ bytes: [UInt8], limits: VerificationLimits) throws(VerificationError) -> SignedDataEnvelope {
        try TLVReader.checkLimits(bytes[...], limits: limits)
        do {
            return try parseChecked(bytes)
        } catch let error as VerificationError {
            throw error
        } catch {
            throw VerificationError(.malformed, "PKCS#7: \(error)")
        }
    }

    private static func children(_ node: ASN1Node, _ what: String) throws -> [ASN1Node] {
        guard case .constructed(let nodes) = node.content else {
            throw VerificationError(.malformed, "\(what) is not a constructed element")
        }
        return Array(nodes)
    }

    private static func parseChecked(_ bytes: [UInt8]) throws -> SignedDataEnvelope {
        let root = try BER.parse(bytes)
        let isBER = root.encodedBytes.count != bytes.count || bytes.count > 1 && bytes[1] == 0x80
        guard root.identifier == .sequence else { throw VerificationError(.malformed, "ContentInfo is not a SEQUENCE") }
        let contentInfo = try children(root, "ContentInfo")
        guard contentInfo.count == 2 else { throw VerificationError(.malformed, "ContentInfo has \(contentInfo.count) fields") }
        let contentType = try ASN1ObjectIdentifier(berEncoded: contentInfo[0])
        guard contentType == OID.signedData else {
            throw VerificationError(.unsupportedFormat, "ContentInfo type \(contentType) is not SignedData")
        }
        guard contentInfo[1].identifier == context0 else { throw VerificationError(.malformed, "SignedData is not [0] EXPLICIT") }
        let wrapped = try children(contentInfo[1], "[0] SignedData")
        guard wrapped.count == 1, wrapped[0].identifier == .sequence else { throw VerificationError(.malformed, "SignedData is not a SEQUENCE") }
        var fields = try children(wrapped[0], "SignedData")[...]

        // version, digestAlgorithms
        guard let version = fields.popFirst(), version.identifier == .integer else {
            throw VerificationError(.malformed, "SignedData version missing")
        }
        guard let digestAlgorithms = fields.popFirst(), digestAlgorithms.identifier == .set else {
            throw VerificationError(.malformed, "SignedData digestAlgorithms missing")
        }

        // encapContentInfo
        guard let encap = fields.popFirst(), encap.identifier == .sequence else { throw VerificationError(.malformed, "encapContentInfo missing") }
        let encapFields = try children(encap, "encapContentInfo")
        guard encapFields.count == 2 else { throw VerificationError(.malformed, "receipt has no encapsulated content (detached signature)") }
        let eContentType = try ASN1ObjectIdentifier(berEncoded: encapFields[0])
        guard eContentType == OID.data else { throw VerificationError(.unsupportedFormat, "eContentType \(eContentType) is not id-data") }
        guard encapFields[1].identifier == context0 else { throw VerificationError(.malformed, "eContent is not [0] EXPLICIT") }
        let eContentWrapper = try children(encapFields[1], "[0] eContent")
        guard eContentWrapper.count == 1 else { throw VerificationError(.malformed, "eContent wrapper holds \(eContentWrapper.count) elements") }
        let content = try ASN1OctetString(berEncoded: eContentWrapper[0]).bytes
        let chunked: Bool
        if case .constructed = eContentWrapper[0].content { chunked = true } else { chunked = false }

        // certificates [0] IMPLICIT, crls [1] IMPLICIT (both optional)
        var certificates: [ArraySlice<UInt8>] = []
        var certificatesEncoded: ArraySlice<UInt8> = []
        if let next = fields.first, next.identifier == context0 {
            _ = fields.popFirst()
            certificatesEncoded = next.encodedBytes
            for cert in try children(next, "certificates") {
                guard cert.identifier == .sequence else { throw VerificationError(.malformed, "certificate is not a SEQUENCE") }
                certificates.append(cert.encodedBytes)
            }
        }
        if let next = fields.first, next.identifier == context1 { _ = fields.popFirst() }

        // signerInfos
        guard let signerInfos = fields.popFirst(), signerInfos.identifier == .set else { throw VerificationError(.malformed, "signerInfos missing") }
        guard fields.isEmpty else { throw VerificationError(.malformed, "unexpected fields after signerInfos") }
        let signers = try children(signerInfos, "signerInfos")
        guard signers.count == 1 else {
            throw VerificationError(.unsupportedFormat, "receipt has \(signers.count) signers; exactly one is supported")
        }
        let signer = try parseSigner(signers[0])
        return SignedDataEnvelope(
            content: content, certificates: certificates, certificatesEncoded: certificatesEncoded,
            signer: signer, isBER: isBER || chunked)
    }

    private static func parseSigner(_ node: ASN1Node) throws -> Signer {
        guard node.identifier == .sequence else { throw VerificationError(.malformed, "SignerInfo is not a SEQUENCE") }
        var fields = try children(node, "SignerInfo")[...]
        guard let version = fields.popFirst(), version.identifier == .integer else {
            throw VerificationError(.malformed, "SignerInfo version missing")
        }
        guard let sid = fields.popFirst() else { throw VerificationError(.malformed, "SignerInfo sid missing") }
        guard sid.identifier == .sequence else {
            throw VerificationError(.unsupportedFormat, "signer identified by subjectKeyIdentifier; issuerAndSerialNumber required")
        }
        let sidFields = try children(sid, "IssuerAndSerialNumber")
        guard sidFields.count == 2, sidFields[0].identifier == .sequence, sidFields[1].identifier == .integer,
            case .primitive(let serial) = sidFields[1].content
        else { throw VerificationError(.malformed, "IssuerAndSerialNumber is malformed") }

        guard let digestNode = fields.popFirst() else { throw VerificationError(.malformed, "SignerInfo digestAlgorithm missing") }
        let digestOID = try algorithmOID(digestNode)
        guard let digest = DigestAlgorithm(oid: digestOID) else {
            throw VerificationError(.unsupportedAlgorithm, "digest algorithm \(digestOID)")
        }
        var signedAttributes: ArraySlice<UInt8>?
        if let next = fields.first, next.identifier == context0 {
            _ = fields.popFirst()
            signedAttributes = next.encodedBytes
        }
        guard let signatureAlgorithmNode = fields.popFirst() else { throw VerificationError(.malformed, "SignerInfo signatureAlgorithm missing") }
        let signatureOID = try algorithmOID(signatureAlgorithmNode)
        let impliedDigest: DigestAlgorithm?
        switch signatureOID {
        case OID.rsaEncryption: impliedDigest = nil
        case OID.sha1WithRSA: impliedDigest = .sha1
        case OID.sha256WithRSA: impliedDigest = .sha256
        case OID.sha384WithRSA: impliedDigest = .sha384
        case OID.sha512WithRSA: impliedDigest = .sha512
        default: throw VerificationError(.unsupportedAlgorithm, "signature algorithm \(signatureOID)")
        }
        if let impliedDigest, impliedDigest != digest {
            throw VerificationError(.malformed, "signature algorithm \(signatureOID) contradicts digest \(digest.rawValue)")
        }
        guard let signatureNode = fields.popFirst() else { throw VerificationError(.malformed, "SignerInfo signature missing") }
        let signature = try ASN1OctetString(berEncoded: signatureNode).bytes
        if let next = fields.first, next.identifier == context1 { _ = fields.popFirst() }
        guard fields.isEmpty else { throw VerificationError(.malformed, "unexpected fields in SignerInfo") }
        return Signer(
            sidEncoded: sid.encodedBytes, issuerEncoded: sidFields[0].encodedBytes, serialBytes: serial,
            digest: digest, signedAttributesEncoded: signedAttributes, signature: signature)
    }

    /// The OID of an AlgorithmIdentifier; parameters must be absent or NULL.
    private static func algorithmOID(_ node: ASN1Node) throws -> ASN1ObjectIdentifier {
        guard node.identifier == .sequence else { throw VerificationError(.malformed, "AlgorithmIdentifier is not a SEQUENCE") }
        let parts = try children(node, "AlgorithmIdentifier")
        guard (1...2).contains(parts.count) else { throw VerificationError(.malformed, "AlgorithmIdentifier has \(parts.count) fields") }
        if parts.count == 2 {
            guard parts[1].identifier == .null else { throw VerificationError(.unsupportedAlgorithm, "algorithm parameters other than NULL") }
        }
        return try ASN1ObjectIdentifier(berEncoded: parts[0])
    }

    /// Checks the signed attributes (when present) and returns the bytes the signature covers:
    /// the content itself, or the DER signed-attributes SET re-tagged from `[0]` to `SET`.
    func signedBytes(contentDigest: [UInt8]) throws(VerificationError) -> [UInt8]? {
        guard let attributes = signer.signedAttributesEncoded else { return nil }
        var reader = TLVReader(attributes)
        let outer = try reader.next()
        guard outer.tag == 0xA0, reader.isAtEnd else { throw VerificationError(.malformed, "signed attributes are not DER") }
        var items = TLVReader(outer.value)
        var sawDigest = false
        var sawContentType = false
        while !items.isAtEnd {
            let attribute = try items.next(tag: 0x30, "signed attribute")
            var parts = TLVReader(attribute.value)
            let oidTLV = try parts.next(tag: 0x06, "signed attribute type")
            let values = try parts.next(tag: 0x31, "signed attribute values")
            let oid: ASN1ObjectIdentifier
            do { oid = try ASN1ObjectIdentifier(derEncoded: oidTLV.encoded) } catch { throw VerificationError(.malformed, "signed attribute OID") }
            var valueReader = TLVReader(values.value)
            if oid == OID.messageDigestAttribute {
                guard !sawDigest else { throw VerificationError(.malformed, "duplicate messageDigest attribute") }
                sawDigest = true
                let value = try valueReader.next(tag: 0x04, "messageDigest")
                guard valueReader.isAtEnd else { throw VerificationError(.malformed, "messageDigest has several values") }
                guard Array(value.value) == contentDigest else {
                    throw VerificationError(.signatureInvalid, "messageDigest attribute does not match the content digest")
                }
            } else if oid == OID.contentTypeAttribute {
                sawContentType = true
                let value = try valueReader.next(tag: 0x06, "contentType")
                guard let type = try? ASN1ObjectIdentifier(derEncoded: value.encoded), type == OID.data else {
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
