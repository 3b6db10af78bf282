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

    /// Whether reading `range` fails with ``ContentStoreError/changed(_:)``.
    static func refused(_ store: S3ContentStore, _ sha256: String, _ range: ClosedRange<Int64>) async throws -> Bool {
        do {
            _ = try await S3ContentStoreTests.read(store, sha256, range)
            return false
        } catch ContentStoreError.changed {
            return true
        }
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
            #expect(try await S3ContentStoreTests.read(store, sha, 10...99_999) == Array(bytes[10...99_999]))

            // Other bytes at the address (one byte flipped, same size): no range of them is read.
            let forged = bytes.enumerated().map { $0.offset == 50_000 ? $0.element ^ 0x5A : $0.element }
            try await store.client.put(store.key(sha256: sha), body: ByteBuffer(bytes: forged), sha256: SHA256.hash(data: forged))
            #expect(try await Self.refused(store, sha, 10...99_999))
            #expect(try await Self.refused(store, sha, 0...Int64(count - 2)), "all but the last byte is a range too")
            // A whole read goes without If-Match (its reader checks it) and pins nothing that
            // does not hash to the address: ranges stay refused.
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
            // Not checked yet: refused.
            #expect(try await Self.refused(store, sha, 100...199))
            #expect(try await S3ContentStoreTests.read(store, sha, 0...300_006) == bytes)
            try await Self.waitForPin(pins, store, sha, retagged)
            #expect(try await S3ContentStoreTests.read(store, sha, 100...199) == Array(bytes[100...199]))
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
            #expect(try await S3ContentStoreTests.read(b, sha, 5...15) == Array(bytes[5...15]), "b keeps a copy of the pin")
            let retagged = try await Self.retag(a, bytes)
            #expect(try await S3ContentStoreTests.read(a, sha, 0...200_002) == bytes)
            try await Self.waitForPin(pins, a, sha, retagged)
            #expect(try await S3ContentStoreTests.read(b, sha, 5...15) == Array(bytes[5...15]))
        }
    }

    @Test func withoutPinsARangeIsReadAsTheStoreHasIt() async throws {
        try await S3ContentStoreTests.withStore { store in
            let bytes = S3ContentStoreTests.bytes(100_001, seed: 5)
            let sha = try await Self.upload(store, bytes, declared: false)
            let forged = Array(bytes.reversed())
            try await store.client.put(store.key(sha256: sha), body: ByteBuffer(bytes: forged), sha256: SHA256.hash(data: forged))
            #expect(await store.pinnedTag(sha256: sha) == nil)
            #expect(try await S3ContentStoreTests.read(store, sha, 0...9) == Array(forged.prefix(10)))
        }
    }
}
