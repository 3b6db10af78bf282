import Foundation
import Testing

@testable import CofferCore

/// The chain cache when full: an entry never found again goes first, so a flood of one
/// receipt's re-encodings (each a new key, each validated once) cannot push out the chains
/// players keep presenting — as clearing the whole table did.
@Suite struct ChainCacheTests {
    @Test func aFullCacheDropsEntriesNeverFoundAgainFirst() throws {
        let anchor = try #require(try TrustAnchor.appleRoots(allowSandbox: true).first)
        let chain = ValidatedChain(
            anchor: anchor, subjects: ["leaf"], certificates: [anchor.certificate], leafKey: anchor.certificate.publicKey,
            validFrom: .distantPast, validUntil: .distantFuture)
        let validator = ChainValidator(anchors: [anchor])
        func key(_ n: Int) -> CacheKey { CacheKey(Array("chain \(n)".utf8)[...]) }
        let now = Date()
        validator.remember(chain, key: key(0))
        #expect(validator.cached(key(0), at: now) != nil)
        // A flood of keys never presented again, far past the table's size.
        for n in 1...(ChainValidator.cacheCapacity * 4) { validator.remember(chain, key: key(n)) }
        #expect(validator.cached(key(0), at: now) != nil, "the chain found again was evicted")
        // The table stays bounded, and the flood's newest entry is there.
        #expect(validator.cached(key(ChainValidator.cacheCapacity * 4), at: now) != nil)
        let survivors = (1...(ChainValidator.cacheCapacity * 4)).filter { validator.cached(key($0), at: now) != nil }.count
        #expect(survivors == ChainValidator.cacheCapacity - 1)
    }
}
