import AsyncHTTPClient
import CofferCore
import CofferS3
import CofferTestSupport
import Crypto
import Foundation
import NIOCore
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The object store against a real S3-protocol server (moto, request authentication on):
/// multipart uploads, what a failed upload leaves, presigned URLs, a wrong secret, and a store
/// that is down or stalled.
@Suite(.timeLimit(.minutes(3))) struct S3ContentStoreTests {
    static let mebibyte = 1024 * 1024

    /// A store on `bucket` (created unless `create` is false) under the prefix `game`, part
    /// size 5 MiB (S3's smallest), shut down after `body`.
    static func withStore<T>(
        bucket: String = MotoServer.uniqueBucketName(), secret: String? = nil, endpoint: String? = nil, timeouts: S3Timeouts = S3Timeouts(),
        create: Bool = true, authenticating: Bool = true, _ body: (S3ContentStore) async throws -> T
    ) async throws -> T {
        let moto = try await MotoServer.shared(authenticating: authenticating)
        if create { try await moto.createBucket(bucket) }
        let client = try S3Client(
            location: try S3Location("s3://\(bucket)/game"), endpoint: endpoint ?? moto.endpoint, region: "us-east-1",
            credentials: S3Credentials(accessKeyId: moto.accessKeyId, secretAccessKey: secret ?? moto.secretAccessKey), timeouts: timeouts)
        let store = S3ContentStore(client: client, partSize: 5 * mebibyte)
        do {
            let result = try await body(store)
            try await client.shutdown()
            return result
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    static func bytes(_ count: Int, seed: UInt64) -> [UInt8] {
        var rng = SplitMix64(state: seed)
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &rng) }
    }

    /// Appends `bytes` in chunks of 1 MiB + 7 (chunks never align with parts).
    static func append(_ bytes: [UInt8], to upload: any ContentUpload) async throws {
        var start = 0
        while start < bytes.count {
            let end = min(bytes.count, start + mebibyte + 7)
            try await upload.append(bytes[start..<end])
            start = end
        }
    }

    static func read(_ store: S3ContentStore, _ sha256: String, _ range: ClosedRange<Int64>) async throws -> [UInt8] {
        var out: [UInt8] = []
        for try await chunk in store.read(sha256: sha256, range: range) { out += chunk }
        return out
    }

    @Test func aMultipartUploadOfUnknownDigestIsCopiedToItsAddressAndLeavesNothingElse() async throws {
        try await Self.withStore { store in
            let bytes = Self.bytes(12 * Self.mebibyte + 17, seed: 1)
            let upload = store.makeUpload(maxBytes: Int64(bytes.count), expectedSHA256: nil)
            try await Self.append(bytes, to: upload)
            let pendingWhileOpen = try await store.client.multipartUploads(prefix: "game/")
            #expect(pendingWhileOpen.count == 1, "two full parts were sent before finish")
            #expect(try await store.objects().isEmpty, "nothing is visible before the upload completed")
            let stored = try await upload.finish(expectedSHA256: nil)
            #expect(stored.sha256 == bytes.sha256Hex && stored.size == Int64(bytes.count))
            #expect(try await store.size(sha256: stored.sha256) == Int64(bytes.count))
            #expect(try await Self.read(store, stored.sha256, 0...Int64(bytes.count - 1)) == bytes)
            let middle: ClosedRange<Int64> = 5_242_000...10_485_800
            #expect(try await Self.read(store, stored.sha256, middle) == Array(bytes[Int(middle.lowerBound)...Int(middle.upperBound)]))
            let keys = try await store.client.list(prefix: "").objects.map(\.key)
            #expect(keys == ["game/objects/\(stored.sha256)"], "the staged copy is gone: \(keys)")
            #expect(try await store.client.multipartUploads(prefix: "").isEmpty)
        }
    }

    @Test func aDeclaredDigestWritesStraightToTheAddressAndAMismatchAbortsTheUpload() async throws {
        try await Self.withStore { store in
            let bytes = Self.bytes(11 * Self.mebibyte, seed: 2)
            let upload = store.makeUpload(maxBytes: Int64(bytes.count), expectedSHA256: bytes.sha256Hex.uppercased())
            try await Self.append(bytes, to: upload)
            let pending = try await store.client.multipartUploads(prefix: "")
            #expect(pending.map(\.key) == ["game/objects/\(bytes.sha256Hex)"], "the parts go to the content address")
            _ = try await upload.finish(expectedSHA256: bytes.sha256Hex)
            #expect(try await Self.read(store, bytes.sha256Hex, 0...Int64(bytes.count - 1)) == bytes)

            // Declared wrong: the parts were sent to the declared address, which never appears.
            let other = Self.bytes(6 * Self.mebibyte, seed: 3)
            let liar = String(repeating: "ab", count: 32)
            let refused = store.makeUpload(maxBytes: Int64(other.count), expectedSHA256: liar)
            try await Self.append(other, to: refused)
            await #expect(throws: ContentStoreError.digestMismatch) { _ = try await refused.finish(expectedSHA256: liar) }
            #expect(try await store.size(sha256: liar) == nil)
            #expect(try await store.size(sha256: other.sha256Hex) == nil)
            #expect(try await store.client.multipartUploads(prefix: "").isEmpty, "the mismatch aborted the multipart upload")
        }
    }

    @Test func anInterruptedUploadAbortsItsMultipartUploadAndOldLeftoversAreRemoved() async throws {
        try await Self.withStore { store in
            struct Dropped: Error {}
            let bytes = Self.bytes(7 * Self.mebibyte, seed: 4)
            let stream = AsyncThrowingStream<[UInt8], any Error> { continuation in
                continuation.yield(Array(bytes[..<(6 * Self.mebibyte)]))
                continuation.finish(throwing: Dropped())  // the client went away mid-body
            }
            await #expect(throws: Dropped.self) { _ = try await store.write(stream, maxBytes: Int64(bytes.count), expectedSHA256: nil) }
            #expect(try await store.client.multipartUploads(prefix: "").isEmpty)
            #expect(try await store.client.list(prefix: "").objects.isEmpty)

            // Too large mid-way: aborted too.
            let upload = store.makeUpload(maxBytes: Int64(6 * Self.mebibyte), expectedSHA256: nil)
            await #expect(throws: ContentStoreError.tooLarge) { try await Self.append(bytes, to: upload) }
            #expect(try await store.client.multipartUploads(prefix: "").isEmpty)

            // What a crashed instance leaves (an upload never completed nor aborted) is removed by age.
            let key = store.client.location.key("uploads/\(Int64(Date().timeIntervalSince1970))-crashed")
            _ = try await store.client.createMultipartUpload(key)
            #expect(try await store.removeAbandonedUploads(olderThan: 3600) == 0, "a young upload may be in progress elsewhere")
            #expect(try await store.removeAbandonedUploads(olderThan: 0) == 1)
            #expect(try await store.client.multipartUploads(prefix: "").isEmpty)
        }
    }

    /// On moto without authentication (moto 5 cannot check query authentication: see
    /// `MotoServer.shared(authenticating:)`); the signature itself is botocore's (SigV4DifferentialTests).
    @Test func aPresignedURLServesTheBytesWithRangeTypeAndName() async throws {
        try await Self.withStore(authenticating: false) { store in
            let bytes = Self.bytes(300_000, seed: 5)
            let stored = try await store.write(
                AsyncStream {
                    $0.yield(bytes); $0.finish()
                }, maxBytes: 1_000_000, expectedSHA256: nil)
            let url = try #require(
                store.presignedURL(sha256: stored.sha256, expires: 30, contentType: "image/png", fileName: "level 1 \"ü\".png", now: Date()))
            #expect(url.contains("X-Amz-Expires=30"))
            let http = HTTPClient.shared
            let whole = try await http.execute(HTTPClientRequest(url: url), timeout: .seconds(30))
            #expect(whole.status == .ok)
            #expect(whole.headers.first(name: "content-type") == "image/png")
            #expect(whole.headers.first(name: "content-disposition")?.hasPrefix("attachment; filename=\"level 1 ___.png\"") == true)
            #expect(whole.headers.first(name: "content-disposition")?.contains("filename*=UTF-8''level%201%20%22%C3%BC%22.png") == true)
            #expect(Array(try await whole.body.collect(upTo: 1_000_000).readableBytesView) == bytes)

            var ranged = HTTPClientRequest(url: url)
            ranged.headers.add(name: "Range", value: "bytes=1000-1999")
            let part = try await http.execute(ranged, timeout: .seconds(30))
            #expect(part.status == .partialContent)
            #expect(Array(try await part.body.collect(upTo: 1_000_000).readableBytesView) == Array(bytes[1000...1999]))

            // Within one second the URL is the one signing gives (kept, not signed again);
            // another second, lifetime, type or name is signed anew.
            let second = Date(timeIntervalSince1970: 1_800_000_000.25)
            let key = store.key(sha256: stored.sha256)
            let disposition = ContentDisposition.attachment("a.png")
            let signed = store.client.presignedGET(
                key, expires: 60, responseContentType: "image/png", responseContentDisposition: disposition, date: second)
            for offset in [0.0, 0.5, 0.7] {
                let url = store.presignedURL(sha256: stored.sha256, expires: 60, contentType: "image/png", fileName: "a.png", now: second + offset)
                #expect(url == signed)
            }
            let next = store.presignedURL(sha256: stored.sha256, expires: 60, contentType: "image/png", fileName: "a.png", now: second + 1)
            #expect(next != signed && next?.contains("X-Amz-Date=20270115T080001Z") == true)
            for url in [
                store.presignedURL(sha256: stored.sha256, expires: 59, contentType: "image/png", fileName: "a.png", now: second + 1),
                store.presignedURL(sha256: stored.sha256, expires: 60, contentType: "image/gif", fileName: "a.png", now: second + 1),
                store.presignedURL(sha256: stored.sha256, expires: 60, contentType: "image/png", fileName: "b.png", now: second + 1),
            ] {
                #expect(url != next)
            }
        }
    }

    @Test func aWrongSecretIsRefusedByTheStoreAndReportedAsAStoreError() async throws {
        try await Self.withStore(secret: "not-the-secret") { store in
            do {
                _ = try await store.client.head(store.key(sha256: String(repeating: "a", count: 64)))
                Issue.record("a request signed with a wrong secret was accepted")
            } catch S3Error.refused(let status, _, _) {
                #expect(status == 403)
            }
            do {
                _ = try await store.client.list(prefix: "")
                Issue.record("a listing signed with a wrong secret was accepted")
            } catch S3Error.refused(let status, let code, _) {
                #expect(status == 403 && code == "SignatureDoesNotMatch")
            }
            await #expect(throws: ContentStoreError.self) { try await store.checkAccess() }
            do {
                try await store.checkAccess()
            } catch ContentStoreError.failed(let detail) {
                #expect(detail.contains("SignatureDoesNotMatch"))
            }
        }
    }

    @Test func aStoreThatIsDownOrStalledFailsWithinTheTimeoutsAsUnavailable() async throws {
        let timeouts = S3Timeouts(connect: .seconds(1), response: .seconds(2), idle: .seconds(2))
        // Nothing listens: refused at once.
        let closed = try SilentListener().closedPort()
        try await Self.withStore(endpoint: "http://127.0.0.1:\(closed)", timeouts: timeouts, create: false) { store in
            do {
                _ = try await store.size(sha256: String(repeating: "a", count: 64))
                Issue.record("an unreachable store answered")
            } catch ContentStoreError.unavailable {}
        }
        // A listener that accepts connections but never answers: the response timeout ends it.
        let silent = try SilentListener()
        defer { silent.close() }
        try await Self.withStore(endpoint: "http://127.0.0.1:\(silent.port)", timeouts: timeouts, create: false) { store in
            let started = ContinuousClock.now
            do {
                _ = try await store.size(sha256: String(repeating: "b", count: 64))
                Issue.record("a stalled store answered")
            } catch ContentStoreError.unavailable {}
            #expect(ContinuousClock.now - started < .seconds(20), "bounded by the timeouts, not hung")
            let upload = store.makeUpload(maxBytes: 100, expectedSHA256: nil)
            try await upload.append(Array("hello".utf8))
            await #expect(throws: ContentStoreError.self) { _ = try await upload.finish(expectedSHA256: nil) }
        }
    }

    @Test func aStoreThatTricklesABodyIsCutByTheMinimumRate() async throws {
        // A byte every 200 ms: the idle limit (20 s, far above any pause even on a loaded CI
        // machine) never fires; the rate rule does — 2 s of grace, then 1,000 bytes/s.
        let trickle = try TrickleServer(length: 10_000, interval: .milliseconds(200))
        defer { trickle.close() }
        let timeouts = S3Timeouts(connect: .seconds(5), response: .seconds(2), idle: .seconds(20), minimumRate: 1000)
        try await Self.withStore(endpoint: "http://127.0.0.1:\(trickle.port)", timeouts: timeouts, create: false) { store in
            let stream = try #require(try await store.open(sha256: String(repeating: "c", count: 64), range: 0...9_999))
            let started = ContinuousClock.now
            var received = 0
            do {
                for try await chunk in stream { received += chunk.count }
                Issue.record("a trickling store was read to the end")
            } catch ContentStoreError.unavailable(let detail) {
                #expect(detail.contains("slower than 1000 bytes/s"), "\(detail)")
            }
            #expect(received < 200 && ContinuousClock.now - started < .seconds(60), "\(received) bytes")
        }
    }

    @Test func locationsAndEndpointsAreParsedStrictly() throws {
        let location = try S3Location("s3://game-assets/studio/prod/")
        #expect(location.bucket == "game-assets" && location.prefix == "studio/prod")
        #expect(location.key("objects/x") == "studio/prod/objects/x")
        #expect(try S3Location("s3://game-assets").prefix == "")
        for bad in ["http://bucket", "s3://", "s3://ab", "s3://Upper", "s3://bucket/../x", "s3://bucket/a//b", "s3://bucket/a b", "s3://-bucket"] {
            #expect(throws: S3ConfigurationError.self, "\(bad)") { try S3Location(bad) }
        }
        let minio = try S3Endpoint(endpoint: "http://127.0.0.1:9000", region: "us-east-1", bucket: "b-1")
        #expect(minio.host == "127.0.0.1:9000" && minio.pathStyle && minio.path(key: "k") == "/b-1/k")
        let aws = try S3Endpoint(endpoint: nil, region: "eu-west-3", bucket: "b-1")
        #expect(aws.host == "b-1.s3.eu-west-3.amazonaws.com" && !aws.pathStyle && aws.path(key: "k") == "/k")
        let dotted = try S3Endpoint(endpoint: nil, region: "eu-west-3", bucket: "b.1.x")
        #expect(dotted.host == "s3.eu-west-3.amazonaws.com" && dotted.path(key: "k") == "/b.1.x/k")
        let r2 = try S3Endpoint(endpoint: "https://acct.r2.cloudflarestorage.com/", region: "auto", bucket: "b-1")
        #expect(
            r2.host == "acct.r2.cloudflarestorage.com"
                && r2.url(path: r2.path(key: "k"), encodedQuery: "") == "https://acct.r2.cloudflarestorage.com/b-1/k")
        for bad in ["ftp://x", "http://", "http://h/?q=1", "http://user:pw@h"] {
            #expect(throws: S3ConfigurationError.self, "\(bad)") { try S3Endpoint(endpoint: bad, region: "us-east-1", bucket: "b-1") }
        }
        #expect(throws: S3ConfigurationError.self) { try S3Endpoint(endpoint: nil, region: "US East", bucket: "b-1") }
        #expect(throws: S3ConfigurationError.self) {
            try S3Client(location: location, endpoint: nil, region: "us-east-1", credentials: S3Credentials(accessKeyId: "", secretAccessKey: ""))
        }
    }
}

extension Array where Element == UInt8 {
    var sha256Hex: String { SHA256.hash(data: self).hexString }
}
