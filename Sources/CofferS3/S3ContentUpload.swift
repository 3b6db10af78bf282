import CofferCore
import Crypto
import Foundation
import NIOCore

/// One object being written to an ``S3ContentStore``: bytes are hashed as they arrive and held
/// until a part is full; full parts go to a multipart upload (started with the first one).
/// ``finish(expectedSHA256:)`` checks the whole digest before anything becomes visible;
/// ``abort()`` aborts the multipart upload. Used from one task at a time.
public final class S3ContentUpload: ContentUpload {
    private let store: S3ContentStore
    private let maxBytes: Int64
    /// The digest declared up front: the object is written straight to its address.
    private let declaredSHA256: String?
    /// Where the bytes go: the declared address, or a staging key.
    private let key: String
    private var pending: ByteBuffer
    private var hasher = SHA256()
    /// The MD5 of a staged upload (no declared digest): a single copy's ETag, which is pinned
    /// only when it is this — whoever can write the bucket could replace the staged object
    /// between its completion and its copy (stores that check `x-amz-copy-source-if-match`
    /// refuse that copy anyway).
    private var md5: Insecure.MD5?
    private var size: Int64 = 0
    private var uploadId: String?
    private var parts: [S3Client.UploadedPart] = []
    /// False once finished, aborted or failed.
    private var open = true
    /// A completed upload sits at the staging key, not yet copied to its address.
    private var staged = false

    init(store: S3ContentStore, maxBytes: Int64, declaredSHA256: String?) {
        self.store = store
        self.maxBytes = maxBytes
        self.declaredSHA256 = declaredSHA256
        key =
            declaredSHA256.map { store.key(sha256: $0) }
            ?? store.client.location.key("uploads/\(Int64(Date().timeIntervalSince1970))-" + UUID().uuidString.lowercased())
        pending = ByteBuffer()
        md5 = declaredSHA256 == nil ? Insecure.MD5() : nil
    }

    public func append(_ bytes: some Collection<UInt8>) async throws {
        guard open else { throw ContentStoreError.io("the upload is closed") }
        guard Int64(bytes.count) <= maxBytes - size else {
            await abort()
            throw ContentStoreError.tooLarge
        }
        if let done: Void = bytes.withContiguousStorageIfAvailable({ buffer in
            hasher.update(bufferPointer: UnsafeRawBufferPointer(buffer))
            md5?.update(bufferPointer: UnsafeRawBufferPointer(buffer))
            pending.writeBytes(buffer)
        }) {
            done
        } else {
            let copy = Array(bytes)
            hasher.update(data: copy)
            md5?.update(data: copy)
            pending.writeBytes(copy)
        }
        size += Int64(bytes.count)
        while pending.readableBytes >= store.partSize {
            guard let part = pending.readSlice(length: store.partSize) else { break }
            try await failing { try await send(part) }
        }
        if pending.readerIndex > 0 { pending.discardReadBytes() }
    }

    public func finish(expectedSHA256: String?) async throws -> (sha256: String, size: Int64) {
        guard open else { throw ContentStoreError.io("the upload is closed") }
        let digest = hasher.finalize().hexString
        let expected = expectedSHA256?.lowercased()
        if (expected != nil && expected != digest) || (declaredSHA256 != nil && declaredSHA256 != digest) {
            await abort()
            throw ContentStoreError.digestMismatch
        }
        let target = store.key(sha256: digest)
        // The ETag of the version written at the address: its bytes were just checked.
        var tag: String?
        try await failing {
            if uploadId == nil {
                // One request: the whole object is in `pending`.
                tag = try await S3ContentStore.translating {
                    try await store.client.put(target, body: pending, sha256: Self.digest(pending))
                }
            } else {
                if pending.readableBytes > 0 || parts.isEmpty { try await send(pending) }
                guard let uploadId else { return }
                tag = try await S3ContentStore.translating {
                    try await store.client.completeMultipartUpload(key, uploadId: uploadId, parts: parts)
                }
                self.uploadId = nil
                if key != target {
                    staged = true
                    guard size <= S3ContentStore.maxCopyBytes else {
                        throw ContentStoreError.failed("an object over 5 GiB must be uploaded with its Content-Digest")
                    }
                    let completed = tag
                    let copied = try await S3ContentStore.translating { try await store.client.copy(from: key, to: target, ifMatch: completed) }
                    tag = copied == md5?.finalize().hexString ? copied : nil
                    try? await store.client.delete(key)
                    staged = false
                }
            }
        }
        open = false
        pending = ByteBuffer()
        if let tag {
            try await store.pinUploaded(digest, tag: tag)
        } else if store.pins {
            // A version whose tag cannot vouch for it (a copy's ETag that is not this upload's
            // MD5, as on SSE-KMS buckets): read back whole, and pinned by that read if right.
            guard case .intact = try await store.checkWhole(sha256: digest) else {
                throw ContentStoreError.failed("the object at \(digest.prefix(16))… is not the bytes uploaded (replaced in the store meanwhile?)")
            }
        }
        return (digest, size)
    }

    public func abort() async {
        open = false
        pending = ByteBuffer()
        // Detached: an upload aborted because its request was cancelled must still reach the
        // store. Bounded by the client's timeouts; a store out of reach keeps the parts until
        // `coffer content gc --delete` (or a lifecycle rule) aborts the upload.
        let (client, key, uploadId, staged) = (store.client, key, uploadId, staged)
        self.uploadId = nil
        self.staged = false
        guard uploadId != nil || staged else { return }
        await Task.detached {
            if let uploadId { try? await client.abortMultipartUpload(key, uploadId: uploadId) }
            if staged { try? await client.delete(key) }
        }.value
    }

    /// Uploads `part` as the next part (starting the multipart upload with the first).
    private func send(_ part: ByteBuffer) async throws {
        guard parts.count < S3ContentStore.maxParts else { throw ContentStoreError.tooLarge }
        let id: String
        if let uploadId {
            id = uploadId
        } else {
            id = try await S3ContentStore.translating { try await store.client.createMultipartUpload(key) }
            uploadId = id
        }
        let number = parts.count + 1
        let uploaded = try await S3ContentStore.translating {
            try await store.client.uploadPart(key, uploadId: id, number: number, body: part, sha256: Self.digest(part))
        }
        parts.append(uploaded)
    }

    static func digest(_ buffer: ByteBuffer) -> SHA256.Digest {
        buffer.withUnsafeReadableBytes { SHA256.hash(data: $0) }
    }

    /// Runs `body`; on failure aborts the upload, then rethrows.
    private func failing(_ body: () async throws -> Void) async throws {
        do { try await body() } catch {
            await abort()
            throw error
        }
    }
}
