import Foundation

extension UUID {
    /// The version 4 (random) UUID made of these 128 bits, big-endian, with its version and
    /// variant bits set (RFC 9562, section 5.4): 122 of the bits are kept.
    static func version4(high: UInt64, low: UInt64) -> UUID {
        let h = (high & 0xFFFF_FFFF_FFFF_0FFF) | 0x0000_0000_0000_4000
        let l = (low & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000
        func byte(_ v: UInt64, _ i: Int) -> UInt8 { UInt8(truncatingIfNeeded: v >> (56 - 8 * i)) }
        return UUID(
            uuid: (
                byte(h, 0), byte(h, 1), byte(h, 2), byte(h, 3), byte(h, 4), byte(h, 5), byte(h, 6), byte(h, 7),
                byte(l, 0), byte(l, 1), byte(l, 2), byte(l, 3), byte(l, 4), byte(l, 5), byte(l, 6), byte(l, 7)
            ))
    }
}
