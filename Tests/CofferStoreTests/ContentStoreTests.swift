import CofferCore
import CofferTestSupport
import Foundation
import Testing

@testable import CofferStore

@Suite("LocalContentStore")
struct ContentStoreTests {
    static let helloWorld = Array("hello world".utf8)
    static let helloWorldSHA256 = "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"

    /// An async sequence of the given chunks.
    static func chunks(_ parts: [[UInt8]]) -> AsyncStream<[UInt8]> {
        AsyncStream { continuation in
            for part in parts { continuation.yield(part) }
            continuation.finish()
        }
    }

    static func permissions(_ path: String) throws -> Int {
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        return try #require(attributes[.posixPermissions] as? Int)
    }

    @Test("init creates objects/ and tmp/ with mode 0700")
    func layout() async throws {
        try await withTemporaryDirectory { dir in
            let root = dir.appendingPathComponent("content").path
            _ = try LocalContentStore(root: root)
            #expect(try Self.permissions(root + "/objects") == 0o700)
            #expect(try Self.permissions(root + "/tmp") == 0o700)
            _ = try LocalContentStore(root: root)  // reopening is fine
        }
    }

    @Test("write stores the bytes under their SHA-256 and path(sha256:) finds them")
    func writeAndPath() async throws {
        try await withTemporaryDirectory { dir in
            let store = try LocalContentStore(root: dir.path)
            #expect(store.path(sha256: Self.helloWorldSHA256) == nil)
            let result = try await store.write(
                Self.chunks([Array("hello".utf8), [], Array(" world".utf8)]), maxBytes: 11, expectedSHA256: Self.helloWorldSHA256)
            #expect(result.sha256 == Self.helloWorldSHA256)
            #expect(result.size == 11)
            let path = try #require(store.path(sha256: Self.helloWorldSHA256))
            #expect(path == dir.path + "/objects/b9/4d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9")
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == Data(Self.helloWorld))
            #expect(try Self.permissions(path) == 0o600)
            #expect(filesBelow(dir.appendingPathComponent("tmp")).isEmpty)

            // Same bytes again: same object, nothing else stored.
            let writer = try store.makeWriter(maxBytes: 100)
            try writer.append(Self.helloWorld)
            let again = try writer.finish(expectedSHA256: nil)
            #expect(again.sha256 == result.sha256)
            #expect(filesBelow(dir) == ["objects/b9/4d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"])
        }
    }

    @Test("the empty object and an upper-case expected digest")
    func emptyObject() async throws {
        try await withTemporaryDirectory { dir in
            let store = try LocalContentStore(root: dir.path)
            let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
            let writer = try store.makeWriter(maxBytes: 0)
            let result = try writer.finish(expectedSHA256: empty.uppercased())
            #expect(result.sha256 == empty)
            #expect(result.size == 0)
            let path = try #require(store.path(sha256: empty))
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)).isEmpty)
        }
    }

    @Test("more than maxBytes throws tooLarge and leaves nothing in tmp/ or objects/")
    func tooLarge() async throws {
        try await withTemporaryDirectory { dir in
            let store = try LocalContentStore(root: dir.path)
            await #expect(throws: ContentStoreError.tooLarge) {
                _ = try await store.write(Self.chunks([Array("hello".utf8), Array(" world".utf8)]), maxBytes: 10, expectedSHA256: nil)
            }
            #expect(filesBelow(dir).isEmpty)

            let writer = try store.makeWriter(maxBytes: 4)
            try writer.append(Array("abcd".utf8))
            #expect(filesBelow(dir.appendingPathComponent("tmp")).count == 1, "the temporary file exists while writing")
            #expect(throws: ContentStoreError.tooLarge) { try writer.append([0x65]) }
            #expect(filesBelow(dir).isEmpty, "deleted as soon as the limit is exceeded")
            #expect(throws: ContentStoreError.self) { _ = try writer.finish(expectedSHA256: nil) }
            #expect(filesBelow(dir).isEmpty)
        }
    }

    @Test("a digest mismatch throws and leaves nothing behind")
    func digestMismatch() async throws {
        try await withTemporaryDirectory { dir in
            let store = try LocalContentStore(root: dir.path)
            await #expect(throws: ContentStoreError.digestMismatch) {
                _ = try await store.write(Self.chunks([Self.helloWorld]), maxBytes: 100, expectedSHA256: String(repeating: "0", count: 64))
            }
            #expect(filesBelow(dir).isEmpty)
            #expect(store.path(sha256: Self.helloWorldSHA256) == nil)
        }
    }

    @Test("abort and a dropped writer delete the temporary file")
    func abortAndDrop() async throws {
        try await withTemporaryDirectory { dir in
            let store = try LocalContentStore(root: dir.path)
            let writer = try store.makeWriter(maxBytes: 100)
            try writer.append(Self.helloWorld)
            writer.abort()
            writer.abort()
            #expect(filesBelow(dir).isEmpty)
            do {
                let dropped = try store.makeWriter(maxBytes: 100)
                try dropped.append(Self.helloWorld)
                #expect(filesBelow(dir).count == 1)
            }
            #expect(filesBelow(dir).isEmpty)
        }
    }

    /// `coffer content gc` and an upload of the same bytes finishing between its check of the
    /// object's time and its removal: the upload's object stays (its catalogue row is about to
    /// name it). Before, a touch landed there and the unlink removed what the upload had just
    /// reported stored.
    @Test("gc never removes an object an upload of the same bytes finished during its check")
    func gcKeepsAnObjectAnUploadFinishedDuringItsCheck() async throws {
        try await withTemporaryDirectory { dir in
            let store = try LocalContentStore(root: dir.path)
            let digest = Self.helloWorldSHA256
            func age() throws {
                let old = Date().addingTimeInterval(-7200).timeIntervalSince1970
                try FileManager.default.setAttributes(
                    [.modificationDate: Date(timeIntervalSince1970: old)], ofItemAtPath: try #require(store.path(sha256: digest)))
            }
            _ = try await store.write(Self.chunks([Self.helloWorld]), maxBytes: 100, expectedSHA256: nil)
            try age()
            let cutoff = Date().addingTimeInterval(-3600)
            let deleted = try store.delete(sha256: digest, ifNotModifiedAfter: cutoff) {
                let upload = try store.makeWriter(maxBytes: 100)
                try upload.append(Self.helloWorld)
                _ = try upload.finish(expectedSHA256: digest)
            }
            #expect(!deleted)
            #expect(try store.size(sha256: digest) == Int64(Self.helloWorld.count), "the upload's object is there")
            #expect(filesBelow(dir.appendingPathComponent("tmp")).isEmpty, "nothing left aside")
            // Nobody uploading: an old unreferenced object goes.
            try age()
            #expect(try store.delete(sha256: digest, ifNotModifiedAfter: cutoff))
            #expect(try store.size(sha256: digest) == nil)
            #expect(filesBelow(dir.appendingPathComponent("tmp")).isEmpty)
        }
    }

    /// A gc that died with an object set aside: the next start puts it back where it is
    /// missing (an upload may have finished just before: its catalogue row names it), and drops
    /// it where the object is there again.
    @Test("an object a dead gc left aside is put back at start")
    func anObjectSetAsideIsPutBack() async throws {
        try await withTemporaryDirectory { dir in
            let store = try LocalContentStore(root: dir.path)
            let digest = Self.helloWorldSHA256
            _ = try await store.write(Self.chunks([Self.helloWorld]), maxBytes: 100, expectedSHA256: nil)
            let object = try #require(store.path(sha256: digest))
            let aside = dir.appendingPathComponent("tmp/gc-\(digest)-\(UUID().uuidString)").path
            #expect(rename(object, aside) == 0)
            #expect(try store.size(sha256: digest) == nil)
            #expect(try store.cleanTemporaryFiles() == 0, "put back, not removed")
            #expect(try store.size(sha256: digest) == Int64(Self.helloWorld.count))
            // Set aside while the object is there again (re-uploaded): the copy goes, the object stays.
            try Data("stale".utf8).write(to: URL(fileURLWithPath: aside))
            #expect(try store.cleanTemporaryFiles() == 1)
            #expect(try store.size(sha256: digest) == Int64(Self.helloWorld.count), "never replaced by what was set aside")
            #expect(filesBelow(dir.appendingPathComponent("tmp")).isEmpty)
        }
    }

    @Test("cleanTemporaryFiles removes leftovers and counts them")
    func cleanTemporaryFiles() async throws {
        try await withTemporaryDirectory { dir in
            let store = try LocalContentStore(root: dir.path)
            _ = try await store.write(Self.chunks([Self.helloWorld]), maxBytes: 100, expectedSHA256: nil)
            for name in ["crash-1.part", "crash-2.part", "crash-3.part"] {
                try Data("partial".utf8).write(to: dir.appendingPathComponent("tmp/" + name))
            }
            #expect(try store.cleanTemporaryFiles() == 3)
            #expect(filesBelow(dir.appendingPathComponent("tmp")).isEmpty)
            #expect(store.path(sha256: Self.helloWorldSHA256) != nil, "objects are untouched")
            #expect(try store.cleanTemporaryFiles() == 0)
        }
    }

    @Test("path(sha256:) only accepts 64 lower-case hex characters")
    func pathValidation() async throws {
        try await withTemporaryDirectory { dir in
            let store = try LocalContentStore(root: dir.path)
            _ = try await store.write(Self.chunks([Self.helloWorld]), maxBytes: 100, expectedSHA256: nil)
            // Files an attacker would like to reach through a crafted digest.
            try Data("secret".utf8).write(to: dir.appendingPathComponent("objects/passwd"))
            let upper = Self.helloWorldSHA256.uppercased()
            try FileManager.default.createDirectory(at: dir.appendingPathComponent("objects/B9"), withIntermediateDirectories: true)
            try Data("decoy".utf8).write(to: dir.appendingPathComponent("objects/B9/" + upper.dropFirst(2)))
            #expect(store.path(sha256: Self.helloWorldSHA256) != nil)
            let rejected = [
                "../etc/passwd", "../../../../etc/passwd", "passwd", "", Self.helloWorldSHA256.uppercased(), String(Self.helloWorldSHA256.dropLast()),
                Self.helloWorldSHA256 + "0", "b9/" + Self.helloWorldSHA256.dropFirst(2), String(Self.helloWorldSHA256.dropLast()) + "g",
                "b9" + String(repeating: "./", count: 31), String(Self.helloWorldSHA256.dropLast()) + "\u{0}",
                "ｂ" + Self.helloWorldSHA256.dropFirst(),
            ]
            for candidate in rejected {
                #expect(!LocalContentStore.isContentAddress(candidate), "\(candidate)")
                #expect(store.path(sha256: candidate) == nil, "\(candidate)")
            }
            #expect(LocalContentStore.isContentAddress(Self.helloWorldSHA256))
            #expect(store.path(sha256: String(repeating: "a", count: 64)) == nil, "valid but absent")
        }
    }

    @Test("a failing chunk sequence leaves nothing behind")
    func failingSequence() async throws {
        struct Broken: Error {}
        try await withTemporaryDirectory { dir in
            let store = try LocalContentStore(root: dir.path)
            let stream = AsyncThrowingStream<[UInt8], any Error> { continuation in
                continuation.yield(Self.helloWorld)
                continuation.finish(throwing: Broken())
            }
            await #expect(throws: Broken.self) { _ = try await store.write(stream, maxBytes: 100, expectedSHA256: nil) }
            #expect(filesBelow(dir).isEmpty)
        }
    }

    @Test("large multi-chunk objects hash like a single buffer")
    func largeObject() async throws {
        try await withTemporaryDirectory { dir in
            let store = try LocalContentStore(root: dir.path)
            var generator = SystemRandomNumberGenerator()
            let bytes = (0..<300_000).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let writer = try store.makeWriter(maxBytes: Int64(bytes.count))
            var offset = 0
            while offset < bytes.count {
                let end = min(bytes.count, offset + 65_521)
                try writer.append(bytes[offset..<end])
                offset = end
            }
            #expect(writer.size == Int64(bytes.count))
            let result = try writer.finish(expectedSHA256: nil)
            let single = try await store.write(Self.chunks([bytes]), maxBytes: Int64(bytes.count), expectedSHA256: result.sha256)
            #expect(single.sha256 == result.sha256)
            let path = try #require(store.path(sha256: result.sha256))
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == Data(bytes))
        }
    }
}
