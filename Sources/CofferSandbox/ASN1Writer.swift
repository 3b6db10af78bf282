/// A tiny ASN.1 writer for the sandbox CA: DER, or BER with indefinite lengths and a
/// chunked OCTET STRING, the way Xcode writes its receipts.
indirect enum ASN1Value {
    case primitive(tag: UInt8, bytes: [UInt8])
    case constructed(tag: UInt8, children: [ASN1Value])
    /// Already-encoded bytes (certificates, names).
    case raw([UInt8])
    /// An OCTET STRING that BER output splits into constructed chunks.
    case chunkedOctetString([UInt8], chunkSize: Int)

    static func sequence(_ children: [ASN1Value]) -> ASN1Value { .constructed(tag: 0x30, children: children) }
    static func set(_ children: [ASN1Value]) -> ASN1Value { .constructed(tag: 0x31, children: children) }
    static func octetString(_ bytes: [UInt8]) -> ASN1Value { .primitive(tag: 0x04, bytes: bytes) }
    static func utf8String(_ text: String) -> ASN1Value { .primitive(tag: 0x0C, bytes: Array(text.utf8)) }
    static func ia5String(_ text: String) -> ASN1Value { .primitive(tag: 0x16, bytes: Array(text.utf8)) }
    static var null: ASN1Value { .primitive(tag: 0x05, bytes: []) }

    static func integer(_ value: Int64) -> ASN1Value {
        var bytes: [UInt8] = []
        var v = value
        repeat {
            bytes.insert(UInt8(truncatingIfNeeded: v), at: 0)
            v >>= 8
        } while !(v == 0 && bytes[0] & 0x80 == 0) && !(v == -1 && bytes[0] & 0x80 != 0)
        return .primitive(tag: 0x02, bytes: bytes)
    }

    static func oid(_ arcs: [UInt]) -> ASN1Value {
        var bytes: [UInt8] = [UInt8(arcs[0] * 40 + arcs[1])]
        for arc in arcs.dropFirst(2) {
            var chunk: [UInt8] = [UInt8(arc & 0x7F)]
            var rest = arc >> 7
            while rest > 0 {
                chunk.insert(UInt8(rest & 0x7F) | 0x80, at: 0)
                rest >>= 7
            }
            bytes += chunk
        }
        return .primitive(tag: 0x06, bytes: bytes)
    }

    func encoded(ber: Bool) -> [UInt8] {
        switch self {
        case .primitive(let tag, let bytes):
            return [tag] + Self.length(bytes.count) + bytes
        case .raw(let bytes):
            return bytes
        case .constructed(let tag, let children):
            let body = children.flatMap { $0.encoded(ber: ber) }
            return ber ? [tag, 0x80] + body + [0, 0] : [tag] + Self.length(body.count) + body
        case .chunkedOctetString(let bytes, let chunkSize):
            guard ber else { return ASN1Value.octetString(bytes).encoded(ber: false) }
            var out: [UInt8] = [0x24, 0x80]
            var index = 0
            while index < bytes.count {
                let end = min(index + chunkSize, bytes.count)
                out += ASN1Value.octetString(Array(bytes[index..<end])).encoded(ber: false)
                index = end
            }
            return out + [0, 0]
        }
    }

    static func length(_ count: Int) -> [UInt8] {
        if count < 0x80 { return [UInt8(count)] }
        var bytes: [UInt8] = []
        var n = count
        while n > 0 {
            bytes.insert(UInt8(n & 0xFF), at: 0)
            n >>= 8
        }
        return [0x80 | UInt8(bytes.count)] + bytes
    }
}
