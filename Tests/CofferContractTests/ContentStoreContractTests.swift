import CofferCore
import CofferTestSupport
import Crypto
import Foundation
import Testing

/// ``ContentStore``: content-addressed objects, written as they arrive, read back in ranges.
@Suite("Content store contract")
struct ContentStoreContractTests {
    static let helloWorld = Array("hello world".utf8)
    static let helloWorldSHA256 = "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"
    static let emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    /// An async sequence of the given chunks.
    static func chunks(_ parts: [[UInt8]]) -> AsyncStream<[UInt8]> {
        AsyncStream { continuation in
            for part in parts { continuation.yield(part) }
            continuation.finish()
        }
    }

    /// The bytes `range` of an object, read through the store.
    static func read(_ content: any ContentStore, _ sha256: String, _ range: ClosedRange<Int64>) async throws -> [UInt8] {
        var out: [UInt8] = []
        for try await chunk in content.read(sha256: sha256, range: range) { out += chunk }
        return out
    }

    @Test("upload then size and read: the exact bytes, whole and in ranges", arguments: ContentBackend.allCases)
    func writeAndRead(backend: ContentBackend) async throws {
        try await backend.withContent { content async throws in
            #expect(try await content.size(sha256: Self.helloWorldSHA256) == nil)
            let result = try await content.write(
                Self.chunks([Array("hello".utf8), [], Array(" world".utf8)]), maxBytes: 11, expectedSHA256: Self.helloWorldSHA256)
            #expect(result.sha256 == Self.helloWorldSHA256)
            #expect(result.size == 11)
            #expect(try await content.size(sha256: Self.helloWorldSHA256) == 11)
            #expect(try await Self.read(content, Self.helloWorldSHA256, 0...10) == Self.helloWorld)
            #expect(try await Self.read(content, Self.helloWorldSHA256, 6...10) == Array("world".utf8))
            #expect(try await Self.read(content, Self.helloWorldSHA256, 4...4) == Array("o".utf8))
            // A file, when the store keeps one, holds the same bytes.
            if let file = content.localFile(sha256: Self.helloWorldSHA256) {
                #expect(FileManager.default.contents(atPath: file.path) == Data(Self.helloWorld))
            }
        }
    }

    @Test("a large object in many chunks: the digest of a single buffer, every range exact", arguments: ContentBackend.allCases)
    func largeObject(backend: ContentBackend) async throws {
        try await backend.withContent { content async throws in
            var rng = SplitMix64(state: 0xB10B)
            let bytes = (0..<300_000).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let parts = stride(from: 0, to: bytes.count, by: 65_521).map { Array(bytes[$0..<min(bytes.count, $0 + 65_521)]) }
            let expected = SHA256.hash(data: bytes).hexString
            let result = try await content.write(Self.chunks(parts), maxBytes: Int64(bytes.count), expectedSHA256: expected)
            #expect(result.sha256 == expected && result.size == Int64(bytes.count))
            #expect(try await Self.read(content, expected, 0...Int64(bytes.count - 1)) == bytes)
            for range: ClosedRange<Int64> in [0...0, 1...65_536, 100_000...299_999, 299_999...299_999] {
                let read = try await Self.read(content, expected, range)
                #expect(read == Array(bytes[Int(range.lowerBound)...Int(range.upperBound)]), "\(range)")
            }
        }
    }

    @Test("the same bytes twice are one object at one address", arguments: ContentBackend.allCases)
    func sameBytesSameAddress(backend: ContentBackend) async throws {
        try await backend.withContent { content async throws in
            let first = try await content.write(Self.chunks([Self.helloWorld]), maxBytes: 100, expectedSHA256: nil)
            let upload = try await content.makeUpload(maxBytes: 100, expectedSHA256: nil)
            try await upload.append(Self.helloWorld[0..<5])
            try await upload.append(Self.helloWorld[5...])
            let second = try await upload.finish(expectedSHA256: nil)
            #expect(first.sha256 == second.sha256 && first.size == second.size)
            #expect(try await Self.read(content, first.sha256, 0...10) == Self.helloWorld)
        }
    }

    @Test("the empty object, and an upper-case expected digest", arguments: ContentBackend.allCases)
    func emptyObject(backend: ContentBackend) async throws {
        try await backend.withContent { content async throws in
            let upload = try await content.makeUpload(maxBytes: 0, expectedSHA256: nil)
            let result = try await upload.finish(expectedSHA256: Self.emptySHA256.uppercased())
            #expect(result.sha256 == Self.emptySHA256 && result.size == 0)
            #expect(try await content.size(sha256: Self.emptySHA256) == 0)
        }
    }

    @Test("more than maxBytes throws tooLarge and stores nothing; the upload is then closed", arguments: ContentBackend.allCases)
    func tooLarge(backend: ContentBackend) async throws {
        try await backend.withContent { content async throws in
            await #expect(throws: ContentStoreError.tooLarge) {
                _ = try await content.write(Self.chunks([Array("hello".utf8), Array(" world".utf8)]), maxBytes: 10, expectedSHA256: nil)
            }
            #expect(try await content.size(sha256: Self.helloWorldSHA256) == nil)

            let upload = try await content.makeUpload(maxBytes: 4, expectedSHA256: nil)
            try await upload.append(Array("abcd".utf8))
            await #expect(throws: ContentStoreError.tooLarge) { try await upload.append([0x65]) }
            await #expect(throws: ContentStoreError.self) { _ = try await upload.finish(expectedSHA256: nil) }
            #expect(try await content.size(sha256: SHA256.hash(data: Array("abcd".utf8)).hexString) == nil)
            #expect(try await content.size(sha256: SHA256.hash(data: Array("abcde".utf8)).hexString) == nil)
        }
    }

    @Test("a digest mismatch throws and stores nothing", arguments: ContentBackend.allCases)
    func digestMismatch(backend: ContentBackend) async throws {
        try await backend.withContent { content async throws in
            await #expect(throws: ContentStoreError.digestMismatch) {
                _ = try await content.write(Self.chunks([Self.helloWorld]), maxBytes: 100, expectedSHA256: String(repeating: "0", count: 64))
            }
            #expect(try await content.size(sha256: Self.helloWorldSHA256) == nil)
        }
    }

    @Test("an aborted upload, or a failing chunk sequence, stores nothing; abort is safe twice", arguments: ContentBackend.allCases)
    func abortAndFailure(backend: ContentBackend) async throws {
        struct Broken: Error {}
        try await backend.withContent { content async throws in
            let upload = try await content.makeUpload(maxBytes: 100, expectedSHA256: nil)
            try await upload.append(Self.helloWorld)
            await upload.abort()
            await upload.abort()
            await #expect(throws: ContentStoreError.self) { _ = try await upload.finish(expectedSHA256: nil) }
            let stream = AsyncThrowingStream<[UInt8], any Error> { continuation in
                continuation.yield(Self.helloWorld)
                continuation.finish(throwing: Broken())
            }
            await #expect(throws: Broken.self) { _ = try await content.write(stream, maxBytes: 100, expectedSHA256: nil) }
            #expect(try await content.size(sha256: Self.helloWorldSHA256) == nil)
        }
    }

    @Test("only a 64-character lower-case hex digest names an object; reading a missing one fails", arguments: ContentBackend.allCases)
    func addresses(backend: ContentBackend) async throws {
        try await backend.withContent { content async throws in
            _ = try await content.write(Self.chunks([Self.helloWorld]), maxBytes: 100, expectedSHA256: nil)
            let rejected = [
                "../etc/passwd", "", Self.helloWorldSHA256.uppercased(), String(Self.helloWorldSHA256.dropLast()), Self.helloWorldSHA256 + "0",
                String(Self.helloWorldSHA256.dropLast()) + "g", "ｂ" + Self.helloWorldSHA256.dropFirst(),
            ]
            for candidate in rejected {
                #expect(try await content.size(sha256: candidate) == nil, "\(candidate)")
                #expect(content.localFile(sha256: candidate) == nil, "\(candidate)")
            }
            let absent = String(repeating: "a", count: 64)
            #expect(try await content.size(sha256: absent) == nil, "valid but absent")
            await #expect(throws: (any Error).self) { _ = try await Self.read(content, absent, 0...0) }
            await #expect(throws: (any Error).self) { _ = try await Self.read(content, Self.helloWorldSHA256.uppercased(), 0...0) }
        }
    }
}

extension ContentStoreContractTests {
    @Test("objects lists what was written; delete removes one, twice without error", arguments: ContentBackend.allCases)
    func listAndDelete(backend: ContentBackend) async throws {
        try await backend.withContent { content async throws in
            let other = Array(repeating: UInt8(7), count: 300)
            _ = try await content.write(Self.chunks([Self.helloWorld]), maxBytes: 100, expectedSHA256: nil)
            let second = try await content.write(Self.chunks([other]), maxBytes: 300, expectedSHA256: nil)
            let listed = try await content.objects()
            #expect(Set(listed.map(\.sha256)) == [Self.helloWorldSHA256, second.sha256])
            #expect(listed.first { $0.sha256 == second.sha256 }?.size == 300)
            try await content.delete(sha256: Self.helloWorldSHA256)
            #expect(try await content.size(sha256: Self.helloWorldSHA256) == nil)
            try await content.delete(sha256: Self.helloWorldSHA256)
            #expect(try await content.objects().map(\.sha256) == [second.sha256])
            #expect(try await content.removeAbandonedUploads(olderThan: 0) == 0, "a finished upload leaves nothing to clean")
        }
    }
}
