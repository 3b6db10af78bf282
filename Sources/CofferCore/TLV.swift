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

/// One ASN.1 tag-length-value seen by ``TLVReader``.
struct TLV {
    var tag: UInt8
    /// Content bytes (for definite lengths).
    var value: ArraySlice<UInt8>
    /// The whole element, header included.
    var encoded: ArraySlice<UInt8>
    var isConstructed: Bool { tag & 0x20 != 0 }
}

/// A strict, bounds-checked reader of definite-length DER elements over a byte slice.
/// It never traps: every malformed length or truncation is a thrown ``VerificationError``.
struct TLVReader {
    private(set) var bytes: ArraySlice<UInt8>

    init(_ bytes: ArraySlice<UInt8>) { self.bytes = bytes }

    var isAtEnd: Bool { bytes.isEmpty }

    /// Reads the next element (single-byte tags only, as in receipts and CMS).
    mutating func next() throws(VerificationError) -> TLV {
        let start = bytes.startIndex
        guard let (tag, length, headerLength) = try Self.header(bytes) else {
            throw VerificationError(.malformed, "indefinite length where DER is required")
        }
        guard length <= bytes.count - headerLength else {
            throw VerificationError(.malformed, "element at offset \(start) runs past the end of its container")
        }
        let valueStart = start + headerLength
        let end = valueStart + length
        let tlv = TLV(tag: tag, value: bytes[valueStart..<end], encoded: bytes[start..<end])
        bytes = bytes[end...]
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

    /// Parses an identifier and length. Returns nil for the indefinite form (0x80).
    static func header(_ bytes: ArraySlice<UInt8>) throws(VerificationError) -> (tag: UInt8, length: Int, headerLength: Int)? {
        var index = bytes.startIndex
        guard index < bytes.endIndex else { throw VerificationError(.malformed, "truncated: missing tag") }
        let tag = bytes[index]
        guard tag & 0x1F != 0x1F else { throw VerificationError(.malformed, "multi-byte ASN.1 tags are not supported") }
        index += 1
        guard index < bytes.endIndex else { throw VerificationError(.malformed, "truncated: missing length") }
        let first = bytes[index]
        index += 1
        if first < 0x80 { return (tag, Int(first), 2) }
        if first == 0x80 { return nil }
        let count = Int(first & 0x7F)
        guard count <= 4 else { throw VerificationError(.limitExceeded, "ASN.1 length field of \(count) bytes") }
        guard bytes.endIndex - index >= count else { throw VerificationError(.malformed, "truncated length field") }
        var length = 0
        for _ in 0..<count {
            length = (length << 8) | Int(bytes[index])
            index += 1
        }
        return (tag, length, 2 + count)
    }

    /// Walks a BER/DER element tree without building it and enforces ``VerificationLimits``:
    /// nesting depth, element count, and that every length fits inside its container.
    /// Indefinite lengths are accepted for constructed elements only.
    static func checkLimits(_ bytes: ArraySlice<UInt8>, limits: VerificationLimits) throws(VerificationError) {
        var elements = 0
        // Each frame: end index of a definite container, or nil for an indefinite one.
        var stack: [Int?] = []
        var index = bytes.startIndex
        let end = bytes.endIndex
        var sawRoot = false
        while true {
            // Close finished definite containers.
            while let top = stack.last, let containerEnd = top, index == containerEnd { stack.removeLast() }
            let limit = stack.last(where: { $0 != nil }).flatMap { $0 } ?? end
            if index == end {
                guard stack.isEmpty else { throw VerificationError(.malformed, "truncated: \(stack.count) unterminated element(s)") }
                break
            }
            if stack.isEmpty && sawRoot { throw VerificationError(.malformed, "trailing bytes after the outer element") }
            sawRoot = true
            // End-of-contents of an indefinite container.
            if bytes[index] == 0x00 {
                guard index + 1 < limit, bytes[index + 1] == 0x00, let top = stack.last, top == nil else {
                    throw VerificationError(.malformed, "unexpected end-of-contents marker at offset \(index - bytes.startIndex)")
                }
                stack.removeLast()
                index += 2
                continue
            }
            elements += 1
            guard elements <= limits.maxElements else {
                throw VerificationError(.limitExceeded, "more than \(limits.maxElements) ASN.1 elements")
            }
            let header = try header(bytes[index..<limit])
            let tag = bytes[index]
            if let (_, length, headerLength) = header {
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
                stack.append(nil)
                guard stack.count <= limits.maxNestingDepth else {
                    throw VerificationError(.limitExceeded, "ASN.1 nesting deeper than \(limits.maxNestingDepth)")
                }
                index += 2
            }
        }
    }
}
