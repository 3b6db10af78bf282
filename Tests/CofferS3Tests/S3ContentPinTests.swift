import CofferCore
import CofferS3
import CofferTestSupport
import Crypto
import Foundation
import NIOCore
import Testing

/// Pins: the store asks for the version of an object whose bytes were checked whenever it
/// reads less than the whole (a range no digest can check), against a real S3-protocol server.
@Suite(.timeLimit(.minutes(3))) struct S3ContentPinTests {
    static let mebibyte = S3ContentStoreTests.mebibyte

    /// Uploads `bytes` through the store (with their digest declared or not); returns the digest.
    static func upload(_ store: S3ContentStore, _ bytes: [UInt8], declared: Bool) async throws -> String {
        let upload = store.makeUpload(maxBytes: Int64(bytes.count), expectedSHA256: declared ? bytes.sha256Hex : nil)
        try await S3ContentStoreTests.append(bytes, to: upload)
        return try await upload.finish(expectedSHA256: nil).sha256
    }

    /// The ETag the store has for `sha256` now.
    static func tag(_ store: S3ContentStore, _ sha256: String) async throws -> String? {
        try await store.client.get(store.key(sha256: sha256), range: 0...0).eTag
    }

    /// Puts `bytes` at the object's address as a one-part multipart upload: the same bytes get
    /// another ETag (`…-1`), as a copy between buckets or a re-upload with other parts would.
    static func retag(_ store: S3ContentStore, _ bytes: [UInt8]) async throws -> String? {
        let key = store.key(sha256: bytes.sha256Hex)
        let id = try await store.client.createMultipartUpload(key)
        let part = try await store.client.uploadPart(key, uploadId: id, number: 1, body: ByteBuffer(bytes: bytes), sha256: SHA256.hash(data: bytes))
        return try await store.client.completeMultipartUpload(key, uploadId: id, parts: [part])
    }

    /// Whether a client's read of `range` (``S3ContentStore/open(sha256:range:)``) fails with
    /// ``ContentStoreError/changed(_:)`` before any byte.
    static func refused(_ store: S3ContentStore, _ sha256: String, _ range: ClosedRange<Int64>) async throws -> Bool {
        do {
            _ = try await store.open(sha256: sha256, range: range)
            return false
        } catch ContentStoreError.changed {
            return true
        }
    }

    /// A client's read of `range`.
    static func served(_ store: S3ContentStore, _ sha256: String, _ range: ClosedRange<Int64>) async throws -> [UInt8] {
        var out: [UInt8] = []
        for try await chunk in try #require(try await store.open(sha256: sha256, range: range)) { out += chunk }
        return out
    }

    /// Waits (60 s at most: moto is slow when the whole suite runs) until `sha256`'s pin is `tag`.
    static func waitForPin(_ pins: InMemoryContentPins, _ store: S3ContentStore, _ sha256: String, _ tag: String?) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while await pins.pinnedTag(location: store.pinLocation, sha256: sha256) != tag, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(await pins.pinnedTag(location: store.pinLocation, sha256: sha256) == tag)
    }

    @Test(
        "every upload pins the version it wrote; a range of any other version is refused",
        arguments: [(100_003, false), (6 * mebibyte + 5, true), (6 * mebibyte + 9, false)])
    func uploadsPinAndRangesOfOtherVersionsAreRefused(count: Int, declared: Bool) async throws {
        try await S3ContentStoreTests.withStore { store in
            let pins = InMemoryContentPins()
            store.attach(pins: pins)
            let bytes = S3ContentStoreTests.bytes(count, seed: UInt64(count))
            let sha = try await Self.upload(store, bytes, declared: declared)
            let written = try await Self.tag(store, sha)
            #expect(written != nil)
            #expect(await pins.pinnedTag(location: store.pinLocation, sha256: sha) == written, "single PUT, multipart, or a staged copy")
            #expect(try await Self.served(store, sha, 10...99_999) == Array(bytes[10...99_999]))

            // Other bytes at the address (one byte flipped, same size): no client read of them, whole or not.
            let forged = bytes.enumerated().map { $0.offset == 50_000 ? $0.element ^ 0x5A : $0.element }
            try await store.client.put(store.key(sha256: sha), body: ByteBuffer(bytes: forged), sha256: SHA256.hash(data: forged))
            #expect(try await Self.refused(store, sha, 10...99_999))
            #expect(try await Self.refused(store, sha, 0...Int64(count - 2)))
            #expect(try await Self.refused(store, sha, 0...Int64(count - 1)), "whole")
            // A checking reader's read (the quarantine's) takes whatever is there and pins
            // nothing that does not hash to the address: clients stay refused.
            #expect(try await S3ContentStoreTests.read(store, sha, 0...Int64(count - 1)) == forged)
            #expect(try await Self.refused(store, sha, 10...99_999))
            #expect(await pins.pinnedTag(location: store.pinLocation, sha256: sha) == written)
        }
    }

    @Test func theRightBytesUnderANewTagArePinnedByAWholeReadThatHashesToTheAddress() async throws {
        try await S3ContentStoreTests.withStore { store in
            let pins = InMemoryContentPins()
            store.attach(pins: pins)
            let bytes = S3ContentStoreTests.bytes(300_007, seed: 7)
            let sha = try await Self.upload(store, bytes, declared: false)
            let retagged = try await Self.retag(store, bytes)
            let uploaded = await pins.pinnedTag(location: store.pinLocation, sha256: sha)
            #expect(retagged != nil && uploaded != nil && retagged != uploaded)
            // Not checked yet: refused to clients, whole or not.
            #expect(try await Self.refused(store, sha, 100...199))
            #expect(try await Self.refused(store, sha, 0...300_006))
            // A checking reader reads it whole, finds the right bytes, and pins them before its stream ends.
            #expect(try await S3ContentStoreTests.read(store, sha, 0...300_006) == bytes)
            #expect(await pins.pinnedTag(location: store.pinLocation, sha256: sha) == retagged)
            #expect(try await Self.served(store, sha, 100...199) == Array(bytes[100...199]))
        }
    }

    /// Two instances: the one whose copy of a pin is stale asks again after the 412 and
    /// follows the version the other checked since.
    @Test func aStaleCopyOfAPinIsAskedAgainAfterA412() async throws {
        try await S3ContentStoreTests.withStore { a in
            let moto = try await MotoServer.shared()
            let client = try S3Client(
                location: a.client.location, endpoint: moto.endpoint, region: "us-east-1",
                credentials: S3Credentials(accessKeyId: moto.accessKeyId, secretAccessKey: moto.secretAccessKey))
            let b = S3ContentStore(client: client, partSize: 5 * Self.mebibyte)
            defer { Task { try? await client.shutdown() } }
            #expect(a.pinLocation == b.pinLocation)
            let pins = InMemoryContentPins()
            a.attach(pins: pins)
            b.attach(pins: pins)
            let bytes = S3ContentStoreTests.bytes(200_003, seed: 9)
            let sha = try await Self.upload(a, bytes, declared: true)
            #expect(try await Self.served(b, sha, 5...15) == Array(bytes[5...15]), "b keeps a copy of the pin")
            let retagged = try await Self.retag(a, bytes)
            #expect(try await S3ContentStoreTests.read(a, sha, 0...200_002) == bytes)
            #expect(await pins.pinnedTag(location: a.pinLocation, sha256: sha) == retagged)
            #expect(try await Self.served(b, sha, 5...15) == Array(bytes[5...15]))
        }
    }

    /// An object not pinned yet (written before pins) is pinned by a client's whole read that
    /// hashes to its address — in the background — and not by one of other bytes.
    @Test func aClientsWholeReadPinsAnObjectWrittenBeforePins() async throws {
        try await S3ContentStoreTests.withStore { store in
            let bytes = S3ContentStoreTests.bytes(150_001, seed: 13)
            let sha = bytes.sha256Hex
            let forged = Array(bytes.reversed())
            let pins = InMemoryContentPins()
            store.attach(pins: pins)
            try await store.client.put(store.key(sha256: sha), body: ByteBuffer(bytes: forged), sha256: SHA256.hash(data: forged))
            #expect(try await Self.served(store, sha, 0...150_000) == forged, "the store passes them on: the server's digest check cuts them")
            try await store.client.put(store.key(sha256: sha), body: ByteBuffer(bytes: bytes), sha256: SHA256.hash(data: bytes))
            let tag = try await Self.tag(store, sha)
            #expect(try await Self.served(store, sha, 0...150_000) == bytes)
            try await Self.waitForPin(pins, store, sha, tag)
            let history = await pins.history(location: store.pinLocation, sha256: sha)
            #expect(history == [tag].compactMap { $0 }, "the forged version was never pinned: \(history)")
        }
    }

    /// Pins that cannot be read any more: an instance that knew an object's pin goes on
    /// asking for that version (it can only refuse bytes); one that never knew it refuses.
    @Test func aPinKnownBeforeTheDatabaseFailedStaysInForce() async throws {
        actor Flaky: ContentPinRepository {
            struct Failure: Error {}
            let pins = InMemoryContentPins()
            var down = false
            func fail() { down = true }
            func pinnedTag(location: String, sha256: String) async throws -> String? {
                if down { throw Failure() }
                return await pins.pinnedTag(location: location, sha256: sha256)
            }
            func pin(location: String, sha256: String, tag: String, at: Date) async throws {
                if down { throw Failure() }
                await pins.pin(location: location, sha256: sha256, tag: tag, at: at)
            }
        }
        try await S3ContentStoreTests.withStore { a in
            let moto = try await MotoServer.shared()
            let knew = S3ContentStore(
                client: try S3Client(
                    location: a.client.location, endpoint: moto.endpoint, region: "us-east-1",
                    credentials: S3Credentials(accessKeyId: moto.accessKeyId, secretAccessKey: moto.secretAccessKey)), pinCache: .zero)
            let never = S3ContentStore(
                client: try S3Client(
                    location: a.client.location, endpoint: moto.endpoint, region: "us-east-1",
                    credentials: S3Credentials(accessKeyId: moto.accessKeyId, secretAccessKey: moto.secretAccessKey)))
            defer {
                Task {
                    try? await knew.client.shutdown(); try? await never.client.shutdown()
                }
            }
            let pins = Flaky()
            for store in [a, knew, never] { store.attach(pins: pins) }
            let bytes = S3ContentStoreTests.bytes(20_001, seed: 19)
            let sha = try await Self.upload(a, bytes, declared: true)
            #expect(try await Self.served(knew, sha, 0...9) == Array(bytes.prefix(10)))
            await pins.fail()
            #expect(try await Self.served(knew, sha, 0...9) == Array(bytes.prefix(10)), "its copy, expired, still in force")
            let forged = Array(bytes.reversed())
            try await a.client.put(a.key(sha256: sha), body: ByteBuffer(bytes: forged), sha256: SHA256.hash(data: forged))
            #expect(try await Self.refused(knew, sha, 0...9), "…and still refusing other bytes")
            do {
                _ = try await never.open(sha256: sha, range: 0...9)
                Issue.record("read without its pin")
            } catch ContentStoreError.unavailable {}
        }
    }

    /// Pins that cannot be read: no client read goes out unpinned (503, not the store's bytes).
    @Test func unreadablePinsFailClosed() async throws {
        struct Down: ContentPinRepository {
            struct Failure: Error {}
            func pinnedTag(location: String, sha256: String) async throws -> String? { throw Failure() }
            func pin(location: String, sha256: String, tag: String, at: Date) async throws { throw Failure() }
        }
        try await S3ContentStoreTests.withStore { store in
            let bytes = S3ContentStoreTests.bytes(10_001, seed: 17)
            let sha = try await Self.upload(store, bytes, declared: true)
            store.attach(pins: Down())
            for range: ClosedRange<Int64> in [0...9, 0...10_000] {
                do {
                    _ = try await store.open(sha256: sha, range: range)
                    Issue.record("read \(range) without its pin")
                } catch ContentStoreError.unavailable {}
            }
            await #expect(throws: ContentStoreError.self) { try await store.pinnedTag(sha256: sha) }
        }
    }

    @Test func withoutPinsARangeIsReadAsTheStoreHasIt() async throws {
        try await S3ContentStoreTests.withStore { store in
            let bytes = S3ContentStoreTests.bytes(100_001, seed: 5)
            let sha = try await Self.upload(store, bytes, declared: false)
            let forged = Array(bytes.reversed())
            try await store.client.put(store.key(sha256: sha), body: ByteBuffer(bytes: forged), sha256: SHA256.hash(data: forged))
            #expect(try await store.pinnedTag(sha256: sha) == nil)
            #expect(try await S3ContentStoreTests.read(store, sha, 0...9) == Array(forged.prefix(10)))
        }
    }
}
