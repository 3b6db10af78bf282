/// Limits applied to untrusted input before and while it is parsed.
public struct VerificationLimits: Sendable, Hashable {
    /// Largest accepted receipt (DER/BER bytes, after base64 decoding) or JWS (characters).
    public var maxInputBytes: Int = 4 * 1024 * 1024
    /// Deepest ASN.1 nesting accepted in the PKCS#7 envelope (Apple's is 9).
    public var maxNestingDepth: Int = 32
    /// Most ASN.1 elements accepted in one PKCS#7 envelope or receipt payload.
    public var maxElements: Int = 250_000
    /// Most in-app purchase records accepted in one receipt.
    public var maxInAppRecords: Int = 20_000

    public init() {}
}

/// One ASN.1 element seen by ``DERCursor``: positions into the cursor's buffer.
struct TLV {
    var tag: UInt8
    var start: Int
    var valueStart: Int
    /// End of the content (before the end-of-contents marker of an indefinite length).
    var valueEnd: Int
    /// End of the whole element.
    var end: Int
    var isConstructed: Bool { tag & 0x20 != 0 }
}

/// A strict, bounds-checked reader of ASN.1 elements (DER, and BER's indefinite lengths)
/// over a byte slice, allocation-free. It never traps: every malformed length or
/// truncation is a thrown ``VerificationError``.
///
/// Why not swift-asn1's parser here: it materialises a node for every element of the
/// envelope, certificate internals included, and that was a fifth of a receipt verification.
/// swift-asn1 (through swift-certificates) still parses the certificates and names.
struct DERCursor {
    let bytes: ArraySlice<UInt8>
    private(set) var position: Int
    let end: Int

    init(_ bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
        self.position = bytes.startIndex
        self.end = bytes.endIndex
    }

    private init(bytes: ArraySlice<UInt8>, position: Int, end: Int) {
        self.bytes = bytes
        self.position = position
        self.end = end
    }

    /// A cursor over the children of a constructed element.
    func children(of tlv: TLV) -> DERCursor { DERCursor(bytes: bytes, position: tlv.valueStart, end: tlv.valueEnd) }

    var isAtEnd: Bool { position >= end }

    func value(_ tlv: TLV) -> ArraySlice<UInt8> { bytes[tlv.valueStart..<tlv.valueEnd] }
    func encoded(_ tlv: TLV) -> ArraySlice<UInt8> { bytes[tlv.start..<tlv.end] }

    /// Reads the next element (single-byte tags only, as in receipts and CMS).
    @inline(__always)
    mutating func next() throws(VerificationError) -> TLV {
        let tlv = try Self.element(in: bytes, at: position, limit: end, depth: 0)
        position = tlv.end
        return tlv
    }

    /// Reads the next element and checks its tag.
    mutating func next(tag expected: UInt8, _ what: @autoclosure () -> String) throws(VerificationError) -> TLV {
        let tlv = try next()
        guard tlv.tag == expected else {
            throw VerificationError(.malformed, "\(what()): expected tag 0x\(String(expected, radix: 16)), found 0x\(String(tlv.tag, radix: 16))")
        }
        return tlv
    }

    /// The next element if its tag is `tag`, else nil (nothing consumed).
    mutating func optional(tag: UInt8) throws(VerificationError) -> TLV? {
        guard position < end, bytes[position] == tag else { return nil }
        return try next()
    }

    /// An OCTET STRING's content: primitive (no copy) or BER-constructed chunks, joined.
    func octetString(_ tlv: TLV, _ what: @autoclosure () -> String) throws(VerificationError) -> ArraySlice<UInt8> {
        if tlv.tag == 0x04 { return value(tlv) }
        guard tlv.tag == 0x24 else { throw VerificationError(.malformed, "\(what()) is not an OCTET STRING") }
        var joined: [UInt8] = []
        var stack = [children(of: tlv)]
        while var cursor = stack.popLast() {
            guard !cursor.isAtEnd else { continue }
            let chunk = try cursor.next()
            stack.append(cursor)
            switch chunk.tag {
            case 0x04: joined.append(contentsOf: value(chunk))
            case 0x24:
                guard stack.count < 8 else { throw VerificationError(.limitExceeded, "\(what()) nests constructed chunks too deeply") }
                stack.append(children(of: chunk))
            default: throw VerificationError(.malformed, "\(what()) holds a non-OCTET STRING chunk")
            }
        }
        return joined[...]
    }

    /// Parses an identifier and length at `index`. `length` is nil for the indefinite form.
    /// (Inlined: it is most of the per-element cost of decoding a receipt's payload.)
    @inline(__always)
    static func header(_ bytes: ArraySlice<UInt8>, at index: Int, limit: Int) throws(VerificationError) -> (
        tag: UInt8, length: Int?, headerLength: Int
    ) {
        guard index < limit else { throw VerificationError(.malformed, "truncated: missing tag") }
        let tag = bytes[index]
        guard tag & 0x1F != 0x1F else { throw VerificationError(.malformed, "multi-byte ASN.1 tags are not supported") }
        guard index + 1 < limit else { throw VerificationError(.malformed, "truncated: missing length") }
        let first = bytes[index + 1]
        if first < 0x80 { return (tag, Int(first), 2) }
        if first == 0x80 { return (tag, nil, 2) }
        let count = Int(first & 0x7F)
        guard count <= 4 else { throw VerificationError(.limitExceeded, "ASN.1 length field of \(count) bytes") }
        guard limit - (index + 2) >= count else { throw VerificationError(.malformed, "truncated length field") }
        var length = 0
        for i in 0..<count { length = (length << 8) | Int(bytes[index + 2 + i]) }
        return (tag, length, 2 + count)
    }

    /// The element at `index`, which must end by `limit`. Indefinite lengths are resolved by
    /// walking the children to the matching end-of-contents marker.
    static func element(in bytes: ArraySlice<UInt8>, at index: Int, limit: Int, depth: Int) throws(VerificationError) -> TLV {
        guard depth < 64 else { throw VerificationError(.limitExceeded, "ASN.1 nesting deeper than 64") }
        let (tag, length, headerLength) = try header(bytes, at: index, limit: limit)
        let valueStart = index + headerLength
        if let length {
            guard length <= limit - valueStart else {
                throw VerificationError(.malformed, "element at offset \(index - bytes.startIndex) runs past the end of its container")
            }
            return TLV(tag: tag, start: index, valueStart: valueStart, valueEnd: valueStart + length, end: valueStart + length)
        }
        guard tag & 0x20 != 0 else { throw VerificationError(.malformed, "indefinite length on a primitive element") }
        var p = valueStart
        while true {
            guard limit - p >= 2 else { throw VerificationError(.malformed, "truncated: unterminated indefinite-length element") }
            if bytes[p] == 0 && bytes[p + 1] == 0 {
                return TLV(tag: tag, start: index, valueStart: valueStart, valueEnd: p, end: p + 2)
            }
            p = try element(in: bytes, at: p, limit: limit, depth: depth + 1).end
        }
    }

    /// Walks a whole BER/DER element tree without building it and enforces
    /// ``VerificationLimits``: nesting depth, element count, lengths inside their containers,
    /// one root element and no trailing bytes. Returns whether any indefinite length was seen.
    @discardableResult
    static func checkLimits(_ bytes: ArraySlice<UInt8>, limits: VerificationLimits) throws(VerificationError) -> Bool {
        var elements = 0
        var sawIndefinite = false
        // Each frame: the end index of a definite container, or nil for an indefinite one.
        var stack: [Int?] = []
        var index = bytes.startIndex
        let end = bytes.endIndex
        var sawRoot = false
        while true {
            while let top = stack.last, let containerEnd = top, index == containerEnd { stack.removeLast() }
            let limit = stack.last(where: { $0 != nil }).flatMap { $0 } ?? end
            if index == end {
                guard stack.isEmpty else { throw VerificationError(.malformed, "truncated: \(stack.count) unterminated element(s)") }
                break
            }
            if stack.isEmpty && sawRoot { throw VerificationError(.malformed, "trailing bytes after the outer element") }
            sawRoot = true
            if bytes[index] == 0x00, let top = stack.last, top == nil {
                guard index + 1 < limit, bytes[index + 1] == 0x00 else {
                    throw VerificationError(.malformed, "malformed end-of-contents marker at offset \(index - bytes.startIndex)")
                }
                stack.removeLast()
                index += 2
                continue
            }
            elements += 1
            guard elements <= limits.maxElements else {
                throw VerificationError(.limitExceeded, "more than \(limits.maxElements) ASN.1 elements")
            }
            let (tag, length, headerLength) = try header(bytes, at: index, limit: limit)
            if let length {
                guard length <= limit - index - headerLength else {
                    throw VerificationError(.malformed, "element at offset \(index - bytes.startIndex) runs past the end of its container")
                }
                if tag & 0x20 != 0 && length > 0 {
                    stack.append(index + headerLength + length)
                    guard stack.count <= limits.maxNestingDepth else {
                        throw VerificationError(.limitExceeded, "ASN.1 nesting deeper than \(limits.maxNestingDepth)")
                    }
                    index += headerLength
                } else {
                    index += headerLength + length
                }
            } else {
                guard tag & 0x20 != 0 else { throw VerificationError(.malformed, "indefinite length on a primitive element") }
                sawIndefinite = true
                stack.append(nil)
                guard stack.count <= limits.maxNestingDepth else {
                    throw VerificationError(.limitExceeded, "ASN.1 nesting deeper than \(limits.maxNestingDepth)")
                }
                index += 2
            }
        }
        return sawIndefinite
    }
}
