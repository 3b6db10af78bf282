import AsyncHTTPClient
import CofferApp
import CofferCore
import CofferS3
import CofferServer
import CofferStore
import CofferTestSupport
import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The HTTP API over a bucket of a real S3-protocol server (moto): uploads stream into it,
/// downloads stream out of it or redirect to it, bad tokens never reach it, and its failures
/// are 503/502 with a code — never a 500, never a hang.
@Suite(.timeLimit(.minutes(3))) struct ObjectStoreHTTPTests {
    /// Runs `body` over a harness whose content lives in a fresh bucket (part size 5 MiB), and
    /// closes it (the object store's connections) afterwards, however `body` ended.
    /// `cacheSize` 0 (the default here): every download goes to the bucket.
    static func withHarness(
        mode: DownloadMode = .stream, authenticating: Bool = true, tokenTTL: TimeInterval = 600, cacheSize: Int = 0,
        _ body: (Harness) async throws -> Void
    ) async throws {
        let h = try await harness(mode: mode, authenticating: authenticating, tokenTTL: tokenTTL, cacheSize: cacheSize)
        defer { h.cleanUp() }
        do {
            try await body(h)
            try await h.services.close()
        } catch {
            try? await h.services.close()
            throw error
        }
    }

    static func harness(mode: DownloadMode, authenticating: Bool, tokenTTL: TimeInterval, cacheSize: Int = 0) async throws -> Harness {
        let moto = try await MotoServer.shared(authenticating: authenticating)
        let bucket = try await moto.createBucket()
        // The credentials of the authenticating server (the other one takes any).
        let keys = try await MotoServer.shared()
        return try await Harness.make(tokenTTL: tokenTTL) { configuration in
            configuration.contentStore = "s3://\(bucket)/game"
            configuration.s3Endpoint = moto.endpoint
            configuration.s3PartSize = 5 * 1024 * 1024
            configuration.downloadMode = mode
            configuration.contentCacheSize = cacheSize
            configuration.credentialEnvironment = keys.environment
        }
    }

    static func bytes(_ count: Int, seed: UInt64) -> [UInt8] {
        var rng = SplitMix64(state: seed)
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &rng) }
    }

    /// Redeems a fresh receipt; returns the download URL of `level-1`.
    static func levelURL(_ client: some TestClientProtocol, transaction: String) async throws -> String {
        let created = try await client.execute(
            uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["receipt": try Harness.receipt(transaction)])
        )
        try #require(created.status == .created, "\(String(decoding: created.body.readableBytesView, as: UTF8.self))")
        let assets = try #require(try Harness.json(created)["assets"] as? [[String: Any]])
        return try #require(assets.first { $0["assetId"] as? String == "level-1" }?["url"] as? String)
    }

    /// Uploads `bytes` as a new version of `level-1` (named `level-1.bin`) with the admin key.
    static func uploadLevel(_ client: some TestClientProtocol, _ h: Harness, _ bytes: [UInt8]) async throws {
        var headers = h.bearer(h.adminKey)
        headers[.contentType] = "application/octet-stream"
        let uploaded = try await client.execute(
            uri: "/v1/admin/assets/level-1?name=level-1.bin", method: .put, headers: headers, body: ByteBuffer(bytes: bytes))
        #expect(uploaded.status == .created)
    }

    static let contentDigest = HTTPField.Name("Content-Digest") ?? .contentType

    /// Puts `bytes` at their address again as a one-part multipart upload: the same bytes
    /// under another ETag (`…-1`), as a copy between buckets would leave them. Returns it.
    static func retag(_ store: S3ContentStore, _ bytes: [UInt8]) async throws -> String? {
        let key = store.key(sha256: bytes.sha256Hex)
        let id = try await store.client.createMultipartUpload(key)
        let part = try await store.client.uploadPart(key, uploadId: id, number: 1, body: ByteBuffer(bytes: bytes), sha256: SHA256.hash(data: bytes))
        return try await store.client.completeMultipartUpload(key, uploadId: id, parts: [part])
    }

    /// An app over `h` whose quarantine re-reads an object 200 ms after it was found changed,
    /// logging only what is critical (the mismatches the tests provoke are errors).
    /// `configuration`: the server's settings in place of the harness's (a download mode).
    static func quarantining(_ h: Harness, configuration: CofferConfiguration? = nil) -> (ContentQuarantine, Logger, some ApplicationProtocol) {
        let quarantine = ContentQuarantine(recheckAfter: .milliseconds(200))
        var logger = Logger(label: "coffer-test")
        logger.logLevel = .critical
        let settings = configuration ?? h.services.configuration
        let app = h.application(
            logger: logger, runtime: ServerRuntime(settings, metrics: h.runtime.metrics, quarantine: quarantine), configuration: settings)
        return (quarantine, logger, app)
    }

    static func digestHeader(_ bytes: [UInt8]) -> String { "sha-256=:\(Data(SHA256.hash(data: bytes)).base64EncodedString()):" }

    @Test func uploadsStreamIntoTheBucketAndStreamedDownloadsReturnTheExactBytes() async throws {
        let big = Self.bytes(11 * 1024 * 1024 + 3, seed: 11)
        try await Self.withHarness { h in
            try await h.app.test(.router) { client in
                var headers = h.bearer(h.adminKey)
                headers[.contentType] = "application/octet-stream"
                headers[Self.contentDigest] = Self.digestHeader(big)
                let uploaded = try await client.execute(
                    uri: "/v1/admin/assets/level-1?name=level-1.bin", method: .put, headers: headers, body: ByteBuffer(bytes: big))
                #expect(uploaded.status == .created, "\(String(decoding: uploaded.body.readableBytesView, as: UTF8.self))")

                // A wrong digest: 400, no new version, and nothing left in the bucket.
                let before = try await h.services.catalogue.asset("level-1")
                headers[Self.contentDigest] = Self.digestHeader(Array(big.reversed()))
                let refused = try await client.execute(uri: "/v1/admin/assets/level-1", method: .put, headers: headers, body: ByteBuffer(bytes: big))
                #expect(refused.status == .badRequest && Harness.code(refused) == "digestMismatch")
                #expect(try await h.services.catalogue.asset("level-1") == before, "no version for a refused upload")
                let store = try #require(h.services.content as? S3ContentStore)
                #expect(try await store.client.multipartUploads(prefix: "").isEmpty)

                let url = try await Self.levelURL(client, transaction: "5001")
                let whole = try await client.execute(uri: url, method: .get)
                #expect(whole.status == .ok)
                #expect(whole.headers[.contentLength] == String(big.count))
                #expect(Array(whole.body.readableBytesView).sha256Hex == big.sha256Hex)
                let ranged = try await client.execute(uri: url, method: .get, headers: [.range: "bytes=5242879-5242890"])
                #expect(ranged.status == .partialContent)
                #expect(Array(ranged.body.readableBytesView) == Array(big[5_242_879...5_242_890]))
                #expect(ranged.headers[.contentRange] == "bytes 5242879-5242890/\(big.count)")
                let head = try await client.execute(uri: url, method: .head)
                #expect(head.status == .ok && head.headers[.contentLength] == String(big.count))
            }
        }
    }

    /// An object changed in the bucket behind Coffer's back (same key, same size, other bytes)
    /// is never streamed to a client whole: the last chunk is held back, the response cut
    /// short, the operator told (log, `coffer_content_mismatches_total`). The object here was
    /// put in the bucket before pins (no pin: nothing refuses it up front, the digest does).
    @Test func anObjectChangedInTheBucketIsNeverStreamedWhole() async throws {
        let bytes = Self.bytes(1_300_007, seed: 31)
        let forged = bytes.enumerated().map { $0.offset == 1_000_000 ? $0.element ^ 0x5A : $0.element }
        try await Self.withHarness { h in
            let (quarantine, logger, app) = Self.quarantining(h)
            try await app.test(.live) { client in
                let store = try #require(h.services.content as? S3ContentStore)
                let key = store.key(sha256: bytes.sha256Hex)
                try await store.client.put(key, body: ByteBuffer(bytes: bytes), sha256: SHA256.hash(data: bytes))
                _ = try await h.services.catalogue.addLoggedAssetVersion(
                    assetId: "level-1", name: "level-1.bin", contentType: "application/octet-stream", size: Int64(bytes.count),
                    sha256: bytes.sha256Hex, at: Date())
                let url = try await Self.levelURL(client, transaction: "5151")
                #expect(try await store.pinnedTag(sha256: bytes.sha256Hex) == nil)
                try await store.client.put(key, body: ByteBuffer(bytes: forged), sha256: SHA256.hash(data: forged))
                var received: [UInt8]? = nil
                do {
                    let response = try await client.execute(uri: url, method: .get)
                    received = Array(response.body.readableBytesView)
                } catch {}  // the connection closed short of its Content-Length
                #expect(received == nil || received?.count ?? 0 < bytes.count, "\(received?.count ?? -1) bytes of \(bytes.count)")
                #expect(quarantine.count == 1)
                // The cut download cannot be resumed: no range of the object, nor its head, nor the
                // whole. (The cut closed the test client's connection: these come on new ones.)
                let base = "http://127.0.0.1:\(try #require(client.port))"
                func get(head: Bool = false, _ headers: [(String, String)] = []) async throws -> (code: UInt, contentRange: String?, body: [UInt8]) {
                    var request = HTTPClientRequest(url: base + url)
                    request.method = head ? .HEAD : .GET
                    for (name, value) in headers { request.headers.add(name: name, value: value) }
                    let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
                    let body = try await response.body.collect(upTo: 4 << 20)
                    return (response.status.code, response.headers.first(name: "content-range"), Array(body.readableBytesView))
                }
                for (head, headers) in [
                    (false, [("Range", "bytes=999990-")]), (false, [("Range", "bytes=1000000-1000000"), ("If-Range", "\"\(bytes.sha256Hex)\"")]),
                    (true, []), (false, []),
                ] {
                    let refused = try await get(head: head, headers)
                    #expect(refused.code == 502 && refused.contentRange == nil, "\(head ? "HEAD" : "GET") \(headers)")
                    if !head { #expect(String(decoding: refused.body, as: UTF8.self).contains("\"contentStoreError\"")) }
                }
                // The right bytes put back: the background check finds them and the object is served again.
                try await store.client.put(key, body: ByteBuffer(bytes: bytes), sha256: SHA256.hash(data: bytes))
                let deadline = ContinuousClock.now + .seconds(60)
                var again = try await get()
                while again.code != 200, ContinuousClock.now < deadline {
                    #expect(again.code == 502)
                    try await Task.sleep(for: .milliseconds(50))
                    again = try await get()
                }
                #expect(again.code == 200 && again.body == bytes)
                #expect(quarantine.count == 0)
                #expect(try await store.pinnedTag(sha256: bytes.sha256Hex) != nil, "the re-read that found the right bytes pinned them")
            }
            try await app.test(.router) { client in
                let metrics = try await client.execute(uri: "/metrics", method: .get)
                #expect(metricValue(String(buffer: metrics.body), "coffer_content_mismatches_total") == 1)
            }
        }
    }

    /// A range cannot be checked against the address: it is asked of the version pinned at
    /// upload (If-Match), and one of an object changed since is a 502 — on the first request,
    /// before any whole download looked, and on an instance that never served the object (the
    /// pin is in the database). The object is quarantined; the right bytes put back, it is
    /// served again. nginx is told the pin too (X-Coffer-If-Match, accel mode).
    @Test func aRangeOfAnObjectChangedInTheBucketIsRefusedOnItsFirstRequest() async throws {
        let bytes = Self.bytes(400_009, seed: 37)
        let forged = bytes.enumerated().map { $0.offset == 7 ? $0.element ^ 0x5A : $0.element }
        try await Self.withHarness { h in
            let (quarantine, logger, app) = Self.quarantining(h)
            let store = try #require(h.services.content as? S3ContentStore)
            let key = store.key(sha256: bytes.sha256Hex)
            let pinned = Mutex("")
            try await app.test(.router) { client in
                try await Self.uploadLevel(client, h, bytes)
                let url = try await Self.levelURL(client, transaction: "5161")
                let tag = try #require(try await store.pinnedTag(sha256: bytes.sha256Hex))
                pinned.withLock { $0 = tag }
                let served = try await client.execute(uri: url, method: .get, headers: [.range: "bytes=0-99"])
                #expect(served.status == .partialContent && Array(served.body.readableBytesView) == Array(bytes.prefix(100)))

                // Another instance (its own store and quarantine, the same database) never read it.
                let other = try ContentStores.s3(
                    "s3://\(store.client.location.bucket)/game", configuration: h.services.configuration,
                    environment: try await MotoServer.shared().environment, logger: Logger(label: "coffer-test"))
                defer { Task { try? await other.client.shutdown() } }
                other.attach(pins: SQLiteCatalogue(h.services.database))
                #expect(try await other.pinnedTag(sha256: bytes.sha256Hex) == tag, "the pin is in the database")

                try await store.client.put(key, body: ByteBuffer(bytes: forged), sha256: SHA256.hash(data: forged))
                let refused = try await client.execute(uri: url, method: .get, headers: [.range: "bytes=0-99"])
                #expect(refused.status == .badGateway && Harness.code(refused) == "contentStoreError")
                #expect(quarantine.count == 1)
                // Nor whole, on an instance that has not quarantined it: refused before a byte.
                do {
                    _ = try await other.open(sha256: bytes.sha256Hex, range: 0...Int64(bytes.count - 1))
                    Issue.record("the other instance streamed the changed object whole")
                } catch ContentStoreError.changed {}
                do {
                    _ = try await other.open(sha256: bytes.sha256Hex, range: 0...99)
                    Issue.record("the other instance read a range of the changed object")
                } catch ContentStoreError.changed {}

                // The right bytes put back (a single PUT: the ETag pinned, the MD5, again).
                try await store.client.put(key, body: ByteBuffer(bytes: bytes), sha256: SHA256.hash(data: bytes))
                let deadline = ContinuousClock.now + .seconds(60)
                var again = try await client.execute(uri: url, method: .get, headers: [.range: "bytes=0-99"])
                while again.status != .partialContent, ContinuousClock.now < deadline {
                    #expect(again.status == .badGateway)
                    try await Task.sleep(for: .milliseconds(50))
                    again = try await client.execute(uri: url, method: .get, headers: [.range: "bytes=0-99"])
                }
                #expect(again.status == .partialContent && Array(again.body.readableBytesView) == Array(bytes.prefix(100)))
                #expect(quarantine.count == 0)
                let metrics = try await client.execute(uri: "/metrics", method: .get)
                #expect(metricValue(String(buffer: metrics.body), "coffer_content_mismatches_total") == 1)
            }
            // Accel mode: nginx gets the pin to send as If-Match.
            var configuration = h.services.configuration
            configuration.downloadMode = .accel
            configuration.accelRedirectPrefix = "/_coffer/"
            try await h.application(logger: logger, runtime: ServerRuntime(configuration), configuration: configuration).test(.router) { client in
                let url = try await Self.levelURL(client, transaction: "5162")
                let handed = try await client.execute(uri: url, method: .get, headers: [.range: "bytes=0-99"])
                let redirect = try #require(HTTPField.Name("X-Accel-Redirect"))
                let ifMatch = try #require(HTTPField.Name("X-Coffer-If-Match"))
                #expect(handed.status == .ok && handed.headers[redirect]?.hasPrefix("/_coffer/s3/") == true)
                #expect(handed.headers[ifMatch] == "\"\(pinned.withLock { $0 })\"")
            }
        }
    }

    /// Accel mode: Coffer never sees nginx's 412, so before handing off it compares the pin
    /// with the version the store's `HEAD` named. The same bytes copied under a new ETag are
    /// quarantined (502), re-read, found right and pinned anew: nginx then asks for the new
    /// version, with no operator in the loop.
    @Test func accelModeHealsAPinLeftStaleByTheSameBytesUnderANewTag() async throws {
        let bytes = Self.bytes(300_011, seed: 47)
        try await Self.withHarness { h in
            let store = try #require(h.services.content as? S3ContentStore)
            var configuration = h.services.configuration
            configuration.downloadMode = .accel
            configuration.accelRedirectPrefix = "/_coffer/"
            let (quarantine, _, app) = Self.quarantining(h, configuration: configuration)
            let ifMatch = try #require(HTTPField.Name("X-Coffer-If-Match"))
            try await app.test(.router) { client in
                try await Self.uploadLevel(client, h, bytes)
                let url = try await Self.levelURL(client, transaction: "5171")
                let retagged = try #require(try await Self.retag(store, bytes))
                let stale = try await client.execute(uri: url, method: .get)
                #expect(stale.status == .badGateway && Harness.code(stale) == "contentStoreError", "never handed to nginx with the old pin")
                #expect(quarantine.count == 1)
                let deadline = ContinuousClock.now + .seconds(60)
                var handed = try await client.execute(uri: url, method: .get)
                while handed.status != .ok, ContinuousClock.now < deadline {
                    #expect(handed.status == .badGateway)
                    try await Task.sleep(for: .milliseconds(50))
                    handed = try await client.execute(uri: url, method: .get)
                }
                #expect(handed.status == .ok && handed.headers[ifMatch] == "\"\(retagged)\"")
                #expect(quarantine.count == 0)
            }
        }
    }

    /// `coffer content verify`: every object the catalogue names read whole and checked; one
    /// written before pins is pinned, one changed or missing is named and the exit is 1.
    @Test func contentVerifyChecksEveryObjectAndPinsTheRightOnes() async throws {
        try await Self.withHarness { h in
            let store = try #require(h.services.content as? S3ContentStore)
            let moto = try await MotoServer.shared()
            let legacy = Self.bytes(200_003, seed: 41)
            let changed = Self.bytes(100_005, seed: 43)
            let missing = String(repeating: "d", count: 64)
            // Pinned at its upload, then the same bytes copied under another ETag: re-pinned.
            let moved = Self.bytes(50_021, seed: 45)
            try await h.store(assetId: "moved", bytes: moved, contentType: "application/octet-stream")
            let movedTag = try await Self.retag(store, moved)
            try await store.client.put(store.key(sha256: legacy.sha256Hex), body: ByteBuffer(bytes: legacy), sha256: SHA256.hash(data: legacy))
            let forged = Array(changed.reversed())
            try await store.client.put(store.key(sha256: changed.sha256Hex), body: ByteBuffer(bytes: forged), sha256: SHA256.hash(data: forged))
            for (id, sha, size) in [("legacy", legacy.sha256Hex, legacy.count), ("changed", changed.sha256Hex, changed.count), ("gone", missing, 9)] {
                _ = try await h.services.catalogue.addLoggedAssetVersion(
                    assetId: id, name: id, contentType: "application/octet-stream", size: Int64(size), sha256: sha, at: Date())
            }
            let run = try await CofferExecutable.run(
                [
                    "content", "verify", "--data-dir", h.directory.path, "--content-store", try #require(h.services.configuration.contentStore),
                    "--s3-endpoint", moto.endpoint,
                ], environment: moto.environment)
            #expect(run.status == 1, "\(run.stdout)\(run.stderr)")
            let lines = run.stdout.split(separator: "\n").map(String.init)
            #expect(lines.contains("ok \(legacy.sha256Hex) 200003 bytes (pinned)"), "\(lines)")
            #expect(lines.contains("ok \(moved.sha256Hex) 50021 bytes (pinned)"), "\(lines)")
            #expect(lines.contains { $0.hasPrefix("changed \(changed.sha256Hex)") }, "\(lines)")
            #expect(lines.contains("missing \(missing)"), "\(lines)")
            #expect(
                lines.filter { $0.hasPrefix("ok ") }.count == 4, "the harness's two assets, pinned at upload, the moved and the legacy one: \(lines)")
            #expect(lines.last == "verified 6 object(s): 4 ok, 2 not")
            // The pin is in the database: this instance asks for that version from now on.
            let tag = try await store.client.get(store.key(sha256: legacy.sha256Hex), range: 0...0).eTag
            #expect(try await SQLiteCatalogue(h.services.database).pinnedTag(location: store.pinLocation, sha256: legacy.sha256Hex) == tag)
            #expect(try await SQLiteCatalogue(h.services.database).pinnedTag(location: store.pinLocation, sha256: changed.sha256Hex) == nil)
            #expect(try await SQLiteCatalogue(h.services.database).pinnedTag(location: store.pinLocation, sha256: moved.sha256Hex) == movedTag)
        }
    }

    @Test func streamedObjectsAreKeptInTheInstancesCacheAndServedFromItWithoutTheBucket() async throws {
        let bytes = Self.bytes(700_001, seed: 21)
        try await Self.withHarness(cacheSize: 64 * 1024 * 1024) { h in
            let cache = try #require(h.services.content as? CachedContentStore)
            try await h.app.test(.router) { client in
                try await Self.uploadLevel(client, h, bytes)
                #expect(cache.statistics.objects == 0, "uploads go to the bucket only")
                let url = try await Self.levelURL(client, transaction: "5101")
                let first = try await client.execute(uri: url, method: .get)
                #expect(first.status == .ok && Array(first.body.readableBytesView).sha256Hex == bytes.sha256Hex)
                // The fill runs in the background; moto is slow when the whole suite runs (60 s at most).
                let deadline = ContinuousClock.now + .seconds(60)
                while cache.statistics.objects == 0, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
                #expect(cache.statistics.objects == 1 && cache.statistics.bytes == Int64(bytes.count), "kept after the first download")

                // Gone from the bucket: this instance still serves its verified copy, whole and in ranges.
                try await cache.remote.delete(sha256: bytes.sha256Hex)
                let again = try await client.execute(uri: url, method: .get)
                #expect(again.status == .ok && again.headers[.contentLength] == String(bytes.count))
                #expect(Array(again.body.readableBytesView).sha256Hex == bytes.sha256Hex)
                let ranged = try await client.execute(uri: url, method: .get, headers: [.range: "bytes=524280-524295"])
                #expect(ranged.status == .partialContent && Array(ranged.body.readableBytesView) == Array(bytes[524_280...524_295]))
                #expect(cache.statistics.hits >= 2)
            }
        }
    }

    @Test func redirectAnswersAShortLivedPresignedURLAndBadTokensNeverReachTheStore() async throws {
        try await Self.withHarness(mode: .redirect, authenticating: false, tokenTTL: 45) { h in try await Self.redirects(h) }
    }

    static func redirects(_ h: Harness) async throws {
        let counting = CountingContentStore(h.services.content)
        var dependencies = h.services.dependencies
        dependencies.content = counting
        var logger = Logger(label: "coffer-test")
        logger.logLevel = .warning
        let app = buildApplication(h.services.configuration, dependencies: dependencies, runtime: h.runtime, logger: logger)
        try await app.test(.router) { client in
            let sha = h.levelBytes.sha256Hex
            let expired = h.services.tokens.mint(
                DownloadClaims(assetId: "level-1", sha256: sha, redemptionId: "r", expiresAt: Int64(Date().timeIntervalSince1970) - 1))
            let forged = TokenSigner(active: TokenKey(id: "k1", key: .init(size: .bits256)))
                .mint(DownloadClaims(assetId: "level-1", sha256: sha, redemptionId: "r", expiresAt: Int64(Date().timeIntervalSince1970) + 60))
            for (token, code) in [(expired, "tokenExpired"), (forged, "tokenInvalid"), ("garbage", "tokenInvalid")] {
                let response = try await client.execute(uri: "/v1/downloads/\(token)", method: .get)
                #expect(response.status == .forbidden && Harness.code(response) == code)
                #expect(response.headers[.location] == nil)
            }
            #expect(counting.calls == 0, "a refused token never reaches the store")

            let url = try await Self.levelURL(client, transaction: "5002")
            // HEAD is answered by Coffer (a presigned URL is for GET only).
            let head = try await client.execute(uri: url, method: .head)
            #expect(head.status == .ok && head.headers[.location] == nil && head.headers[.contentLength] == String(h.levelBytes.count))
            let redirect = try await client.execute(uri: url, method: .get)
            #expect(redirect.status == .found)
            #expect(redirect.headers[.cacheControl] == "private, no-store")
            let location = try #require(redirect.headers[.location])
            let moto = try await MotoServer.shared(authenticating: false)
            #expect(location.hasPrefix(moto.endpoint + "/"))
            let expires = try #require(
                URLComponents(string: location)?.queryItems?.first { $0.name == "X-Amz-Expires" }?.value.flatMap(Int.init))
            #expect(expires <= 45 && expires >= 30, "≤ 60 s and never beyond the token's remaining life: \(expires)")
            #expect(location.contains("response-cache-control=private%2C%20no-store"))
            // A token with longer to live: the URL still lives 60 s at most.
            let long = h.services.tokens.mint(
                DownloadClaims(assetId: "level-1", sha256: sha, redemptionId: "r", expiresAt: Int64(Date().timeIntervalSince1970) + 3600))
            let capped = try await client.execute(uri: "/v1/downloads/\(long)", method: .get)
            #expect(capped.headers[.location]?.contains("X-Amz-Expires=60&") == true)
            #expect(location.contains("response-content-type=application%2Fjson"))
            #expect(counting.calls > 0)

            let whole = try await HTTPClient.shared.execute(HTTPClientRequest(url: location), timeout: .seconds(30))
            #expect(whole.status == .ok)
            #expect(whole.headers.first(name: "content-type") == "application/json")
            #expect(whole.headers.first(name: "content-disposition")?.contains("filename=\"level-1\"") == true)
            #expect(Array(try await whole.body.collect(upTo: 1 << 20).readableBytesView) == h.levelBytes)
            var ranged = HTTPClientRequest(url: location)
            ranged.headers.add(name: "Range", value: "bytes=2-5")
            let part = try await HTTPClient.shared.execute(ranged, timeout: .seconds(30))
            #expect(part.status == .partialContent)
            #expect(Array(try await part.body.collect(upTo: 1 << 20).readableBytesView) == Array(h.levelBytes[2...5]))
        }
    }

    @Test func aStoreThatIsDownStalledOrRefusingGives503Or502WithACode() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let token = h.services.tokens.mint(
            DownloadClaims(assetId: "level-1", sha256: h.levelBytes.sha256Hex, redemptionId: "r", expiresAt: Int64(Date().timeIntervalSince1970) + 60)
        )
        let silent = try SilentListener()
        defer { silent.close() }
        let moto = try await MotoServer.shared()
        // The silent store must time out quickly; moto (one Python process shared by every
        // suite running in parallel) gets the defaults' room, or a busy CI machine turns its
        // refusal into a timeout: 503 where 502 is asserted.
        let cases: [(endpoint: String, secret: String, timeouts: S3Timeouts, status: HTTPResponse.Status, code: String)] = [
            (
                "http://127.0.0.1:\(silent.port)", moto.secretAccessKey, S3Timeouts(connect: .seconds(1), response: .seconds(2), idle: .seconds(2)),
                .serviceUnavailable, "contentStoreUnavailable"
            ),
            (
                moto.endpoint, "wrong-secret", S3Timeouts(connect: .seconds(10), response: .seconds(25), idle: .seconds(25)), .badGateway,
                "contentStoreError"
            ),
        ]
        for item in cases {
            let client = try S3Client(
                location: try S3Location("s3://\(MotoServer.uniqueBucketName())"), endpoint: item.endpoint, region: "us-east-1",
                credentials: S3Credentials(accessKeyId: moto.accessKeyId, secretAccessKey: item.secret), timeouts: item.timeouts)
            var dependencies = h.services.dependencies
            dependencies.content = S3ContentStore(client: client, partSize: 5 * 1024 * 1024)
            var logger = Logger(label: "coffer-test")
            logger.logLevel = .critical
            let app = buildApplication(h.services.configuration, dependencies: dependencies, runtime: h.runtime, logger: logger)
            do {
                try await app.test(.router) { http in
                    let started = ContinuousClock.now
                    let download = try await http.execute(uri: "/v1/downloads/\(token)", method: .get)
                    #expect(download.status == item.status && Harness.code(download) == item.code, "\(item.endpoint)")
                    if item.status == .serviceUnavailable { #expect(download.headers[.retryAfter] != nil) }
                    var headers = h.bearer(h.adminKey)
                    headers[.contentType] = "application/octet-stream"
                    let upload = try await http.execute(
                        uri: "/v1/admin/assets/level-9", method: .put, headers: headers, body: ByteBuffer(bytes: Array("new level".utf8)))
                    #expect(upload.status == item.status && Harness.code(upload) == item.code, "\(item.endpoint)")
                    #expect(try await h.services.catalogue.asset("level-9") == nil)
                    if item.status == .serviceUnavailable {
                        #expect(ContinuousClock.now - started < .seconds(30), "bounded by the store's timeouts")
                    }
                }
                try await client.shutdown()
            } catch {
                try? await client.shutdown()
                throw error
            }
        }
    }
}

/// Counts every call that reaches the wrapped store.
final class CountingContentStore: ContentStore {
    let base: any ContentStore
    private let count = Atomic<Int>(0)
    var calls: Int { count.load(ordering: .relaxed) }

    init(_ base: any ContentStore) { self.base = base }

    private func tick() { count.add(1, ordering: .relaxed) }

    func makeUpload(maxBytes: Int64, expectedSHA256: String?) async throws -> any ContentUpload {
        tick()
        return try await base.makeUpload(maxBytes: maxBytes, expectedSHA256: expectedSHA256)
    }
    func size(sha256: String) async throws -> Int64? {
        tick()
        return try await base.size(sha256: sha256)
    }
    func read(sha256: String, range: ClosedRange<Int64>) -> AsyncThrowingStream<[UInt8], any Error> {
        tick()
        return base.read(sha256: sha256, range: range)
    }
    func localFile(sha256: String) -> LocalContentFile? {
        tick()
        return base.localFile(sha256: sha256)
    }
    func presignedURL(sha256: String, expires: Int, contentType: String, fileName: String, now: Date) -> String? {
        tick()
        return base.presignedURL(sha256: sha256, expires: expires, contentType: contentType, fileName: fileName, now: now)
    }
    func objects() async throws -> [StoredObject] {
        tick()
        return try await base.objects()
    }
    func delete(sha256: String) async throws {
        tick()
        try await base.delete(sha256: sha256)
    }
    func open(sha256: String, range: ClosedRange<Int64>) async throws -> AsyncThrowingStream<[UInt8], any Error>? {
        tick()
        return try await base.open(sha256: sha256, range: range)
    }
    func delete(sha256: String, ifNotModifiedAfter cutoff: Date) async throws -> Bool {
        tick()
        return try await base.delete(sha256: sha256, ifNotModifiedAfter: cutoff)
    }
    func removeAbandonedUploads(olderThan: TimeInterval) async throws -> Int {
        tick()
        return try await base.removeAbandonedUploads(olderThan: olderThan)
    }
}
