import CofferCore
import CofferS3
import CofferStore
import CofferTestSupport
import Foundation
import Testing

/// The content stores the content contract runs over: the in-memory double, the local
/// directory, and a bucket on a real S3-protocol server (moto, request authentication on),
/// with the smallest part size S3 allows so that multipart uploads are exercised too.
enum ContentBackend: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case inMemory
    case local
    case s3

    var testDescription: String { rawValue }

    /// Runs `body` over a fresh, empty store of this backend, and disposes of it afterwards.
    func withContent<T>(_ body: (any ContentStore) async throws -> T) async throws -> T {
        switch self {
        case .inMemory:
            return try await body(InMemoryContentStore(chunkSize: 7))
        case .local:
            return try await withTemporaryDirectory(prefix: "coffer-content") { directory in
                try await body(try LocalContentStore(root: directory.appendingPathComponent("content").path))
            }
        case .s3:
            let store = try await Self.s3Store()
            do {
                let result = try await body(store)
                try await store.client.shutdown()
                return result
            } catch {
                try? await store.client.shutdown()
                throw error
            }
        }
    }

    /// A store on a new bucket of the shared moto server, under a key prefix.
    static func s3Store(partSize: Int = 5 * 1024 * 1024, timeouts: S3Timeouts = S3Timeouts()) async throws -> S3ContentStore {
        let moto = try await MotoServer.shared()
        let bucket = try await moto.createBucket()
        let client = try S3Client(
            location: try S3Location("s3://\(bucket)/assets/v1"), endpoint: moto.endpoint, region: "us-east-1", credentials: moto.credentials,
            timeouts: timeouts)
        return S3ContentStore(client: client, partSize: partSize)
    }
}
