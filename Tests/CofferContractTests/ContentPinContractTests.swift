import CofferCore
import CofferTestSupport
import Foundation
import Testing

/// ``ContentPinRepository``: the version of each object a store checked, per store.
@Suite("Content pin contract")
struct ContentPinContractTests {
    @Test("a pin is read back, replaced, and kept apart per store", arguments: Backend.allCases)
    func pinsArePerStoreAndReplaced(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let pins = storage.pins
            let sha = String(repeating: "ab", count: 32)
            let other = String(repeating: "cd", count: 32)
            let bucket = "127.0.0.1:9000 s3://game/objects"
            #expect(try await pins.pinnedTag(location: bucket, sha256: sha) == nil)
            try await pins.pin(location: bucket, sha256: sha, tag: "9b2cf535f27731c974343645a3985328", at: instant(1))
            #expect(try await pins.pinnedTag(location: bucket, sha256: sha) == "9b2cf535f27731c974343645a3985328")
            #expect(try await pins.pinnedTag(location: bucket, sha256: other) == nil)
            #expect(try await pins.pinnedTag(location: "s3.amazonaws.com s3://game/objects", sha256: sha) == nil, "another store")
            try await pins.pin(location: bucket, sha256: sha, tag: "6f1ed002ab5595859014ebf0951522d9-2", at: instant(2))
            #expect(try await pins.pinnedTag(location: bucket, sha256: sha) == "6f1ed002ab5595859014ebf0951522d9-2", "replaced")
            try await pins.pin(location: "r2 s3://game/objects", sha256: sha, tag: "x", at: instant(3))
            #expect(try await pins.pinnedTag(location: bucket, sha256: sha) == "6f1ed002ab5595859014ebf0951522d9-2", "kept apart")
        }
    }
}
