import CofferS3
import Foundation

extension MotoServer {
    /// The IAM user's key, for an ``S3Client``.
    public var credentials: S3Credentials { S3Credentials(accessKeyId: accessKeyId, secretAccessKey: secretAccessKey) }

    /// Creates a bucket (a fresh name unless one is given) and returns its name.
    @discardableResult
    public func createBucket(_ name: String = MotoServer.uniqueBucketName()) async throws -> String {
        let owner = try S3Client(location: try S3Location("s3://\(name)"), endpoint: endpoint, region: "us-east-1", credentials: credentials)
        do {
            try await owner.createBucket()
            try await owner.shutdown()
        } catch {
            try? await owner.shutdown()
            throw error
        }
        return name
    }
}
