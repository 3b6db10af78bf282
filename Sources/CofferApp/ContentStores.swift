import CofferCore
import CofferS3
import CofferServer
import CofferStore
import Foundation
import Logging

/// The content store a deployment serves from: `DATA/content/` (the default), or the bucket
/// of `--content-store s3://BUCKET[/PREFIX]`, which several instances share.
public enum ContentStores {
    /// The store `configuration` names, checked: a bucket is listed once at start-up, so a
    /// wrong endpoint, bucket, region or credential stops the server with one clear line
    /// instead of failing its first upload. `shared`: other instances use the same data
    /// directory (only partial local uploads untouched for an hour are removed).
    /// `cleanTemporary`: remove partial local uploads an earlier run left (a server starting).
    public static func open(
        _ configuration: CofferConfiguration, shared: Bool, cleanTemporary: Bool = true, logger: Logger
    ) async throws -> any ContentStore {
        let environment = configuration.credentialEnvironment ?? ProcessInfo.processInfo.environment
        guard let url = configuration.contentStore else {
            let content = try LocalContentStore(root: DataDirectory(configuration.dataDirectory).content)
            guard cleanTemporary else { return content }
            let cleaned = try content.cleanTemporaryFiles(olderThan: shared ? 3600 : 0)
            if cleaned > 0 { logger.warning("removed \(cleaned) partial upload(s) left by an earlier run") }
            return content
        }
        let store = try s3(url, configuration: configuration, environment: environment, logger: logger)
        do {
            try await store.checkAccess()
        } catch {
            try? await store.client.shutdown()
            throw S3ConfigurationError("the content store \(store.client.location) does not answer as it should: \(error)")
        }
        logger.info(
            "content in an object store",
            metadata: [
                "store": "\(store.client.location)", "endpoint": "\(configuration.s3Endpoint ?? "AWS")", "region": "\(configuration.s3Region)",
            ])
        return store
    }

    /// The S3 store of `url`, with `credentials` (tests), or credentials from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`
    /// and `AWS_SESSION_TOKEN` (not checked against the store: see ``open(_:shared:cleanTemporary:logger:)``).
    public static func s3(_ url: String, configuration: CofferConfiguration, environment: [String: String], logger: Logger) throws
        -> S3ContentStore
    {
        let location = try S3Location(url)
        let credentials = S3Credentials(
            accessKeyId: environment["AWS_ACCESS_KEY_ID"] ?? "", secretAccessKey: environment["AWS_SECRET_ACCESS_KEY"] ?? "",
            sessionToken: environment["AWS_SESSION_TOKEN"].flatMap { $0.isEmpty ? nil : $0 })
        // A streamed download waits for its client as long as the stall timeout allows: the
        // store's idle limit must not cut it sooner.
        let timeouts = S3Timeouts(idle: .seconds(max(30, configuration.downloadStallTimeoutSeconds + 5)))
        let client = try S3Client(
            location: location, endpoint: configuration.s3Endpoint, region: configuration.s3Region, credentials: credentials, timeouts: timeouts,
            logger: logger)
        return S3ContentStore(client: client, partSize: configuration.s3PartSize)
    }

    /// `content` behind this instance's read-through cache when ``CofferConfiguration/contentCacheDirectory``
    /// says so (an object store, stream mode, a budget), else `content` itself. A server's
    /// store only: tools that copy or collect objects go to the store directly.
    public static func cached(_ content: any ContentStore, _ configuration: CofferConfiguration, logger: Logger) throws -> any ContentStore {
        guard let directory = configuration.contentCacheDirectory else { return content }
        let cache = try CachedContentStore(remote: content, directory: directory, budget: Int64(configuration.contentCacheSize), logger: logger)
        let held = cache.statistics
        logger.info(
            "object store cache",
            metadata: ["directory": "\(directory)", "budget": "\(cache.budget)", "objects": "\(held.objects)", "bytes": "\(held.bytes)"])
        return cache
    }

    /// Has an object store (behind the cache or not) pin the versions it checked in `pins`
    /// (``S3ContentStore``); other stores keep no pins.
    public static func attach(pins: any ContentPinRepository, to content: any ContentStore) {
        if let cache = content as? CachedContentStore { attach(pins: pins, to: cache.remote) }
        if let s3 = content as? S3ContentStore { s3.attach(pins: pins) }
    }

    /// Releases what the store holds (the object store's connections).
    public static func close(_ content: any ContentStore) async {
        if let cache = content as? CachedContentStore { await close(cache.remote) }
        if let s3 = content as? S3ContentStore { try? await s3.client.shutdown() }
    }
}
