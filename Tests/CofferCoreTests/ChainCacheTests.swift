import Foundation
import Testing

@testable import CofferCore

/// The chain cache when full: an entry never found again goes first, so a flood of one
/// receipt's re-encodings (each a new key, each validated once) cannot push out the chains
/// players keep presenting — as clearing the whole table did.
@Suite struct ChainCacheTests {
    /// A validator and one chain (any chain: the cache only keeps it), valid at all times.
    static func validator() throws -> (ChainValidator, ValidatedChain) {
        let anchor = try #require(try TrustAnchor.appleRoots(allowSandbox: true).first)
        let chain = ValidatedChain(
            anchor: anchor, subjects: ["leaf"], certificates: [anchor.certificate], leafKey: anchor.certificate.publicKey,
            validFrom: .distantPast, validUntil: .distantFuture)
        return (ChainValidator(anchors: [anchor]), chain)
    }

    static func key(_ n: Int) -> CacheKey { CacheKey(Array("chain \(n)".utf8)[...]) }

    @Test func aFullCacheDropsEntriesNeverFoundAgainFirst() throws {
        let (validator, chain) = try Self.validator()
        let now = Date()
        validator.remember(chain, key: Self.key(0))
        #expect(validator.cached(Self.key(0), at: now) != nil)
        // A flood of keys never presented again, far past the table's size.
        for n in 1...(ChainValidator.cacheCapacity * 4) { validator.remember(chain, key: Self.key(n)) }
        #expect(validator.cached(Self.key(0), at: now) != nil, "the chain found again was evicted")
        // The table stays bounded, and the flood's newest entry is there.
        #expect(validator.cached(Self.key(ChainValidator.cacheCapacity * 4), at: now) != nil)
        let survivors = (1...(ChainValidator.cacheCapacity * 4)).filter { validator.cached(Self.key($0), at: now) != nil }.count
        #expect(survivors == ChainValidator.cacheCapacity - 1)
    }

    /// Keys found twice cannot hold the table for good: when every entry was found again, the
    /// least recently used goes, and a chain found again since stays while the flood's go.
    @Test func keysFoundTwiceDoNotPinTheTable() throws {
        let (validator, chain) = try Self.validator()
        let now = Date()
        let capacity = ChainValidator.cacheCapacity
        // The attacker's: every one presented again.
        for n in 1...capacity {
            validator.remember(chain, key: Self.key(n))
            _ = validator.cached(Self.key(n), at: now)
        }
        // A new certificate's chain, presented again by players between the flood's misses.
        validator.remember(chain, key: Self.key(0))
        for n in (capacity + 1)...(capacity * 3) {
            #expect(validator.cached(Self.key(0), at: now) != nil, "evicted before miss \(n)")
            validator.remember(chain, key: Self.key(n))
        }
        #expect(validator.cached(Self.key(0), at: now) != nil)
    }

    /// A key of 4,000 bytes that differs from the others only at bytes 100 and 101, outside
    /// every window ``CacheKey`` hashes: all such keys share one hash, as a JWS header padded
    /// around a real Apple chain can.
    static func colliding(_ n: Int) -> CacheKey {
        var bytes = (0..<4000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        bytes[100] = UInt8(truncatingIfNeeded: n)
        bytes[101] = UInt8(truncatingIfNeeded: n >> 8)
        return CacheKey(bytes[...])
    }

    /// Keys that share a hash hold at most a bucket's few entries: a flood of them cannot make
    /// every lookup compare hundreds of keys whole under the cache's lock, and the chain
    /// players keep presenting (a key of the same hash, found again) stays.
    @Test func keysSharingAHashHoldOneBucket() throws {
        let (validator, chain) = try Self.validator()
        let now = Date()
        let flood = ChainValidator.cacheCapacity * 2
        #expect(Set((0...flood).map { Self.colliding($0).hashValue }).count == 1)
        validator.remember(chain, key: Self.colliding(0))
        #expect(validator.cached(Self.colliding(0), at: now) != nil)
        for n in 1...flood {
            validator.remember(chain, key: Self.colliding(n))
            _ = validator.cached(Self.colliding(0), at: now)
        }
        #expect(validator.cached(Self.colliding(0), at: now) != nil, "the chain found again was evicted")
        let survivors = (1...flood).filter { validator.cached(Self.colliding($0), at: now) != nil }.count
        #expect(survivors == ChainValidator.bucketCapacity - 1)
        // Keys of other hashes still fill the rest of the table.
        for n in 1...ChainValidator.cacheCapacity { validator.remember(chain, key: Self.key(n)) }
        let others = (1...ChainValidator.cacheCapacity).filter { validator.cached(Self.key($0), at: now) != nil }.count
        #expect(others == ChainValidator.cacheCapacity - ChainValidator.bucketCapacity)
        #expect(validator.cached(Self.colliding(0), at: now) != nil)
    }
}
