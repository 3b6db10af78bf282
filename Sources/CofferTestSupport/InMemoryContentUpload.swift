import CofferCore
import Crypto
import Foundation

/// One object being written into an ``InMemoryContentStore``: bytes are hashed as they
/// arrive and kept aside until ``finish(expectedSHA256:)``. Used from one task at a time.
public final class InMemoryContentUpload: ContentUpload {
    private let maxBytes: Int64
    private let store: InMemoryContentStore
    private var bytes: [UInt8] = []
    private var hasher = SHA256()
    /// False once finished, aborted or refused.
    private var open = true

    init(maxBytes: Int64, store: InMemoryContentStore) {
        self.maxBytes = maxBytes
        self.store = store
    }

    public func append(_ chunk: some Collection<UInt8>) throws {
        guard open else { throw ContentStoreError.io("the upload is closed") }
        guard Int64(chunk.count) <= maxBytes - Int64(bytes.count) else {
            abort()
            throw ContentStoreError.tooLarge
        }
        bytes.append(contentsOf: chunk)
        hasher.update(data: Array(chunk))
    }

    public func finish(expectedSHA256: String?) throws -> (sha256: String, size: Int64) {
        guard open else { throw ContentStoreError.io("the upload is closed") }
        let digest = hasher.finalize().hexString
        if let expectedSHA256, expectedSHA256.lowercased() != digest {
            abort()
            throw ContentStoreError.digestMismatch
        }
        open = false
        store.install(bytes, sha256: digest)
        let size = Int64(bytes.count)
        bytes = []
        return (digest, size)
    }

    public func abort() {
        open = false
        bytes = []
    }
}
