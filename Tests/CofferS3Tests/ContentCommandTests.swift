import CofferCore
import CofferS3
import CofferStore
import CofferTestSupport
import Foundation
import Testing

/// `coffer content migrate` and `coffer content gc`, run as a user would, against a bucket of
/// a real S3-protocol server (moto, authentication on).
@Suite(.timeLimit(.minutes(3))) struct ContentCommandTests {
    /// A data directory with a catalogue naming `referenced` (two versions of one asset) and a
    /// local store holding those and `stray`.
    static func dataDirectory(_ root: URL, referenced: [[UInt8]], stray: [UInt8]) async throws -> URL {
        let data = root.appendingPathComponent("data")
        try FileManager.default.createDirectory(at: data, withIntermediateDirectories: true)
        let database = try CofferDatabase(path: DataDirectory(data.path).database)
        defer { try? database.close() }
        let catalogue = SQLiteCatalogue(database)
        let local = try LocalContentStore(root: DataDirectory(data.path).content)
        for bytes in referenced + [stray] {
            let stored = try await local.write(
                AsyncStream {
                    $0.yield(bytes); $0.finish()
                }, maxBytes: Int64(bytes.count), expectedSHA256: nil)
            if bytes != stray {
                _ = try await catalogue.addAssetVersion(
                    assetId: "level", name: "level.bin", contentType: "application/octet-stream", size: stored.size, sha256: stored.sha256, at: Date()
                )
            }
        }
        return data
    }

    /// This process's environment with the moto user's credentials: what `coffer` runs with.
    static func environment(_ moto: MotoServer) -> [String: String] {
        ProcessInfo.processInfo.environment.merging(moto.environment) { $1 }
    }

    static func bytes(_ count: Int, seed: UInt64) -> [UInt8] {
        var rng = SplitMix64(state: seed)
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &rng) }
    }

    @Test func migrateCopiesEveryObjectOnceResumesAfterALossAndRefusesADamagedFile() async throws {
        let moto = try await MotoServer.shared()
        let root = try makeTemporaryDirectory(prefix: "coffer-migrate")
        defer { try? FileManager.default.removeItem(at: root) }
        let v1 = Self.bytes(6 * 1024 * 1024 + 5, seed: 21)  // two parts
        let v2 = Self.bytes(1000, seed: 22)
        let stray = Self.bytes(10, seed: 23)
        let data = try await Self.dataDirectory(root, referenced: [v1, v2], stray: stray)
        let bucket = try await moto.createBucket()
        let environment = Self.environment(moto)
        let arguments = [
            "content", "migrate", "--data-dir", data.path, "--to", "s3://\(bucket)/game", "--s3-endpoint", moto.endpoint,
        ]

        let first = try await CofferExecutable.run(arguments, environment: environment)
        #expect(first.status == 0, "\(first.stdout)\(first.stderr)")
        #expect(first.stdout.contains("copied 3 object(s)"), "\(first.stdout)")
        #expect(first.stderr.contains("[3/3]"), "progress on stderr: \(first.stderr)")
        try await S3ContentStoreTests.withStore(bucket: bucket, create: false) { store async throws in
            for bytes in [v1, v2, stray] {
                #expect(try await S3ContentStoreTests.read(store, bytes.sha256Hex, 0...Int64(bytes.count - 1)) == bytes)
            }
            try await store.delete(sha256: v2.sha256Hex)  // lost in the bucket: the next run copies it again
        }

        let again = try await CofferExecutable.run(arguments, environment: environment)
        #expect(again.status == 0 && again.stdout.contains("copied 1 object(s)") && again.stdout.contains("2 already there"), "\(again.stdout)")
        let idle = try await CofferExecutable.run(arguments, environment: environment)
        #expect(idle.stdout.contains("copied 0 object(s)") && idle.stdout.contains("3 already there"), "\(idle.stdout)")

        // A file whose bytes no longer hash to its name is reported and not copied.
        let damaged = Self.bytes(2000, seed: 24)
        let local = try LocalContentStore(root: DataDirectory(data.path).content)
        _ = try await local.write(
            AsyncStream {
                $0.yield(damaged); $0.finish()
            }, maxBytes: 2000, expectedSHA256: nil)
        let path = try #require(local.path(sha256: damaged.sha256Hex))
        try Data(Self.bytes(2000, seed: 25)).write(to: URL(fileURLWithPath: path))
        let refused = try await CofferExecutable.run(arguments, environment: environment)
        #expect(refused.status == 1, "\(refused.stdout)\(refused.stderr)")
        #expect(refused.stderr.contains("do not hash to its name"), "\(refused.stderr)")
        try await S3ContentStoreTests.withStore(bucket: bucket, create: false) { store async throws in
            #expect(try await store.size(sha256: damaged.sha256Hex) == nil)
            #expect(try await store.client.multipartUploads(prefix: "").isEmpty)
        }

        var wrong = environment
        wrong["AWS_SECRET_ACCESS_KEY"] = "wrong"
        let denied = try await CofferExecutable.run(arguments, environment: wrong)
        #expect(denied.status == 2 && denied.stderr.contains("SignatureDoesNotMatch"), "\(denied.stderr)")
    }

    @Test func gcListsByDefaultAndDeletesOnlyUnreferencedOldObjects() async throws {
        let moto = try await MotoServer.shared()
        let root = try makeTemporaryDirectory(prefix: "coffer-gc")
        defer { try? FileManager.default.removeItem(at: root) }
        let v1 = Self.bytes(300, seed: 31)
        let v2 = Self.bytes(400, seed: 32)
        let stray = Self.bytes(500, seed: 33)
        let data = try await Self.dataDirectory(root, referenced: [v1, v2], stray: stray)
        let bucket = try await moto.createBucket()
        let environment = Self.environment(moto)
        let migrate = try await CofferExecutable.run(
            ["content", "migrate", "--data-dir", data.path, "--to", "s3://\(bucket)/game", "--s3-endpoint", moto.endpoint], environment: environment)
        try #require(migrate.status == 0, "\(migrate.stderr)")
        let store = ["--data-dir", data.path, "--content-store", "s3://\(bucket)/game", "--s3-endpoint", moto.endpoint]

        let young = try await CofferExecutable.run(["content", "gc"] + store, environment: environment)
        #expect(young.status == 0 && young.stdout.contains("dry run: 0 unreferenced") && young.stdout.contains("1 younger"), "\(young.stdout)")
        let dry = try await CofferExecutable.run(["content", "gc", "--min-age", "0"] + store, environment: environment)
        #expect(dry.stdout.contains("unreferenced \(stray.sha256Hex) 500 bytes") && dry.stdout.contains("dry run: 1 unreferenced"), "\(dry.stdout)")
        let removed = try await CofferExecutable.run(["content", "gc", "--min-age", "0", "--delete"] + store, environment: environment)
        #expect(removed.status == 0 && removed.stdout.contains("removed 1 unreferenced object(s), 500 bytes"), "\(removed.stdout)\(removed.stderr)")
        try await S3ContentStoreTests.withStore(bucket: bucket, create: false) { store async throws in
            #expect(Set(try await store.objects().map(\.sha256)) == [v1.sha256Hex, v2.sha256Hex], "both versions of the asset are kept")
        }
        // A catalogue that names objects the store does not hold (the wrong --data-dir, or
        // another bucket): listed with a warning, never deleted from without --force.
        let other = try await moto.createBucket()
        try await S3ContentStoreTests.withStore(bucket: other, create: false) { store async throws in
            _ = try await store.write(
                AsyncStream {
                    $0.yield(stray); $0.finish()
                }, maxBytes: 500, expectedSHA256: nil)
        }
        let wrongStore = ["--data-dir", data.path, "--content-store", "s3://\(other)/game", "--s3-endpoint", moto.endpoint]
        let refusedGC = try await CofferExecutable.run(["content", "gc", "--min-age", "0", "--delete"] + wrongStore, environment: environment)
        #expect(refusedGC.status == 2 && refusedGC.stderr.contains("does not match the store"), "\(refusedGC.stdout)\(refusedGC.stderr)")
        try await S3ContentStoreTests.withStore(bucket: other, create: false) { store async throws in
            #expect(try await store.size(sha256: stray.sha256Hex) == 500, "nothing deleted")
        }

        // The local store too (no --content-store).
        let local = try await CofferExecutable.run(
            ["content", "gc", "--min-age", "0", "--delete", "--data-dir", data.path], environment: environment)
        #expect(local.status == 0 && local.stdout.contains("removed 1 unreferenced"), "\(local.stdout)\(local.stderr)")
        #expect(try LocalContentStore(root: DataDirectory(data.path).content).path(sha256: stray.sha256Hex) == nil)
    }
}
