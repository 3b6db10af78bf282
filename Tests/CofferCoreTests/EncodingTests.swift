import Foundation
import Testing

@testable import CofferCore

@Suite struct EncodingTests {
    @Test(arguments: 0..<40)
    func base64RoundTripsEveryLength(length: Int) throws {
        let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
        let standard = Data(bytes).base64EncodedString()
        #expect(Base64.decode(standard) == bytes)
        #expect(Base64.decode(Data(bytes).base64EncodedString(options: .lineLength64Characters)) == bytes)
        let url = Base64.encodeURL(bytes)
        #expect(Base64.decodeURL(url) == bytes)
        // RFC 4648 §5: the standard encoding with - _ for + / and no padding.
        let expected = String(standard.map { $0 == "+" ? "-" : $0 == "/" ? "_" : $0 }.filter { $0 != "=" })
        #expect(url == expected)
    }

    @Test func version4UUIDKeepsTheBitsAndSetsVersionAndVariant() {
        // Every bit set, then none: only the version (4) and variant (10) bits are forced.
        #expect(UUID.version4(high: .max, low: .max).uuidString == "FFFFFFFF-FFFF-4FFF-BFFF-FFFFFFFFFFFF")
        #expect(UUID.version4(high: 0, low: 0).uuidString == "00000000-0000-4000-8000-000000000000")
        #expect(
            UUID.version4(high: 0x0123_4567_89AB_CDEF, low: 0xFEDC_BA98_7654_3210).uuidString == "01234567-89AB-4DEF-BEDC-BA9876543210")
        let ids = (0..<64).map { _ in Vault.randomRedemptionId() }
        #expect(Set(ids).count == 64)
        for id in ids {
            #expect(UUID(uuidString: id) != nil && id == id.lowercased())
            let chars = Array(id)
            #expect(chars[14] == "4" && "89ab".contains(chars[19]), "version 4, RFC variant: \(id)")
        }
    }

    @Test func base64RejectsWhatItShould() {
        #expect(Base64.decode("QQ=") == nil, "short padding")
        #expect(Base64.decode("QQ===") == nil, "extra padding")
        #expect(Base64.decode("Q") == nil, "a lone character")
        #expect(Base64.decode("QR==") == nil, "non-zero trailing bits")
        #expect(Base64.decode("QQ==QQ==") == nil, "data after padding")
        #expect(Base64.decode("a-b_") == nil, "url alphabet in standard base64")
        #expect(Base64.decodeURL("a+b/") == nil, "standard alphabet in base64url")
        #expect(Base64.decodeURL("QQ==") == nil, "padding in base64url")
        #expect(Base64.decodeURL("Q Q") == nil, "whitespace in base64url")
        #expect(Base64.decode("QQ==") == [0x41])
        #expect(Base64.decode("QUI=") == [0x41, 0x42])
        #expect(Base64.decode("") == [])
    }

    /// The allocation-free base64url decoder against a reference: a string is accepted iff it
    /// is the canonical unpadded base64url of the bytes Foundation decodes from it. Every
    /// string of up to five characters over an alphabet mixing valid, foreign-alphabet,
    /// padding, whitespace and trailing-bit cases.
    @Test func base64URLMatchesAReferenceOnEveryShortString() {
        let alphabet: [Character] = ["A", "Q", "w", "_", "-", "+", "=", " "]
        var strings: [String] = [""]
        var frontier: [String] = [""]
        for _ in 0..<5 {
            frontier = frontier.flatMap { prefix in alphabet.map { prefix + String($0) } }
            strings += frontier
        }
        var checked = 0
        for text in strings {
            var reference: [UInt8]? = nil
            if !text.contains(where: { "+/= ".contains($0) }) {
                var standard = String(text.map { $0 == "-" ? "+" : $0 == "_" ? "/" : $0 })
                standard += String(repeating: "=", count: (4 - standard.count % 4) % 4)
                if let data = Data(base64Encoded: standard), Base64.encodeURL(Array(data)) == text { reference = Array(data) }
            }
            #expect(Base64.decodeURL(text) == reference, "\(text.debugDescription)")
            checked += 1
        }
        #expect(checked == 37_449)
    }

    @Test(arguments: [
        ("2024-02-23T17:27:16Z", 1_708_709_236.0),
        ("2020-10-16T14:29:30+0300", 1_602_847_770.0),
        ("2020-10-16T14:29:30+03:00", 1_602_847_770.0),
        ("4001-01-01T02:00:00+0200", 64_092_211_200.0),
        ("2023-10-19T01:45:36.049Z", 1_697_679_936.049),
        ("2016-02-29T00:00:00-0800", 1_456_732_800.0),
    ])
    func rfc3339Parses(text: String, seconds: Double) throws {
        let date = try #require(RFC3339.parse(text))
        #expect(abs(date.timeIntervalSince1970 - seconds) < 0.0005)
    }

    @Test(arguments: [
        "", "2024-02-23", "2024-02-30T00:00:00Z", "2023-02-29T00:00:00Z", "2024-13-01T00:00:00Z", "2024-02-23T24:00:00Z",
        "2024-02-23T17:27:16", "2024-02-23T17:27:16Zjunk", "2024-02-23T17:27:16.Z", "２024-02-23T17:27:16Z",
    ])
    func rfc3339RejectsGarbage(text: String) {
        #expect(RFC3339.parse(text) == nil)
    }

    @Test func rfc3339FormatsUTC() {
        #expect(RFC3339.format(Date(timeIntervalSince1970: 1_708_709_236)) == "2024-02-23T17:27:16Z")
        #expect(RFC3339.format(Date(timeIntervalSince1970: 64_092_211_200)) == "4001-01-01T00:00:00Z")
        #expect(RFC3339.format(Date(timeIntervalSince1970: -1)) == "1969-12-31T23:59:59Z")
    }
}

/// The chain cache's key: sampled hash, exact equality.
@Suite struct CacheKeyTests {
    @Test func keysDifferingInAnyByteAreDifferentEvenWhenTheirHashesCollide() {
        let base = (0..<4000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let key = CacheKey(base[...])
        #expect(key == CacheKey(base[0..<1000], base[1000...]))
        #expect(key.hashValue == CacheKey(base[0..<1000], base[1000...]).hashValue)
        for index in [0, 100, 999, 2000, 3999] {
            var edited = base
            edited[index] ^= 1
            #expect(key != CacheKey(edited[...]), "byte \(index)")
        }
        // Byte 100 lies outside every hashed window: same hash, still not equal.
        var outside = base
        outside[100] ^= 1
        #expect(key.hashValue == CacheKey(outside[...]).hashValue)
        #expect(key != CacheKey(outside[...]))
        #expect(key != CacheKey(base.dropLast()))
        #expect(CacheKey([][...]) == CacheKey([][...]))
    }
}
