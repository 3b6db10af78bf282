import CofferCore
import Crypto
import Hummingbird
import NIOCore
import NIOFileSystem

/// Streams a byte range of a content-store file into a response with bounded memory: at most
/// two chunks per download in Coffer (the one being written and the next being read) plus
/// about one in the channel.
///
/// Why not Hummingbird's `FileIO`: NIO's async outbound writer accepts a write at once while
/// the channel is writable and hands it to the event loop later. Under load the loop falls
/// behind, and a fast producer queues chunk after chunk there before writability
/// back-pressure arrives — measured: 290 MB of live chunks (malloc_stats) and RSS peaks of
/// 220–840 MB under 16 concurrent 100 MB downloads. So after each chunk this waits for a
/// no-op on the connection's event loop: the loop runs its tasks in order, so by then the
/// chunk is in the channel and, if the socket is full, the writer knows it is not writable
/// and the next write suspends. The next chunk is read (on NIO's thread pool) while the
/// current one is written.
enum FileStream {
    /// 512 KiB: against 128 KiB it cuts the server's CPU per GB by ~25% (fewer thread hops);
    /// 1 MiB saves ~15% more but doubles the memory a slow download holds.
    static let chunkLength: Int64 = 512 * 1024

    /// The file ended before the range did: the store's files are immutable, so it was
    /// damaged underneath. The response is cut short (the client sees a truncated body).
    struct ShortRead: Error {}

    /// After a write that waited longer than this for the client, the rest is written in
    /// ``slowSliceLength`` slices: each accepted slice is progress for the stall watchdog, so a
    /// slow but steady client (a few KB/s) is not taken for a stalled one.
    static let slowWrite = TimeAmount.seconds(1)
    static let slowSliceLength = 64 * 1024

    /// What a stream needs besides the file: its connection, the stall deadline and what to
    /// do when it passes, and the download slot it holds (released when the body ends).
    struct Watch: Sendable {
        var channel: any Channel
        var stallTimeout: TimeAmount
        var onStall: @Sendable () -> Void
        var slot: DownloadSlot?
        /// Called once when the body ends: the bytes the client accepted, and whether all were.
        var onFinish: (@Sendable (_ sent: Int64, _ finished: Bool) -> Void)? = nil
    }

    /// Streams bytes `range` of the file at `path`, reading the next chunk while the current
    /// one is written.
    static func body(path: String, range: ClosedRange<Int64>, watch: Watch) -> ResponseBody {
        body(length: range.upperBound - range.lowerBound + 1, watch: watch) { send in
            try await FileSystem.shared.withFileHandle(forReadingAt: FilePath(path)) { handle in
                var chunk = try await read(handle, at: range.lowerBound, through: range.upperBound)
                var offset = range.lowerBound + Int64(chunk.readableBytes)
                while offset <= range.upperBound {
                    let at = offset
                    async let next = read(handle, at: at, through: range.upperBound)
                    try await send(chunk)
                    chunk = try await next
                    offset += Int64(chunk.readableBytes)
                }
                try await send(chunk)
            }
        }
    }

    /// The object's bytes are not the ones its address names: changed in the store behind
    /// Coffer's back. The response is cut short before its last chunk, so the client never
    /// holds a complete body of other bytes.
    struct DigestMismatch: Error {}

    /// Streams `chunks` (a content store's read of `length` bytes) with the same back-pressure
    /// and stall watchdog as a file. With `sha256` (a whole object), the bytes are hashed as
    /// they pass and the last chunk is sent only if they are the object's: else `onMismatch`
    /// runs and the body ends short.
    static func body(
        chunks: AsyncThrowingStream<[UInt8], any Error>, length: Int64, watch: Watch, sha256: String? = nil,
        onMismatch: @escaping @Sendable () -> Void = {}
    ) -> ResponseBody {
        body(length: length, watch: watch) { send in
            var sent: Int64 = 0
            var hasher = sha256.map { _ in SHA256() }
            for try await chunk in chunks {
                sent += Int64(chunk.count)
                guard sent <= length else { throw ShortRead() }
                hasher?.update(data: chunk)
                if sent == length, let digest = hasher?.finalize(), digest.hexString != sha256 {
                    onMismatch()
                    throw DigestMismatch()
                }
                try await send(ByteBuffer(bytes: chunk))
            }
            guard sent == length else { throw ShortRead() }
        }
    }

    /// The response body: `produce` hands every chunk to `send`, which writes it, waits until
    /// the event loop has it (back-pressure), and counts it as progress for the stall watchdog.
    private static func body(
        length: Int64, watch: Watch, produce: @escaping @Sendable (_ send: (ByteBuffer) async throws -> Void) async throws -> Void
    ) -> ResponseBody {
        ResponseBody(contentLength: Int(length)) { writer in
            defer { watch.slot?.release() }
            let eventLoop = watch.channel.eventLoop
            // Every write must be accepted within the stall timeout, or the connection is closed.
            let watchdog = StallWatchdog(channel: watch.channel, timeout: watch.stallTimeout, onStall: watch.onStall)
            defer { watchdog.stop() }
            var slice = Int.max
            var sent: Int64 = 0
            var finished = false
            defer { watch.onFinish?(sent, finished) }
            try await produce { chunk in
                var chunk = chunk
                while chunk.readableBytes > 0 {
                    let length = min(slice, chunk.readableBytes)
                    guard let part = chunk.readSlice(length: length) else { return }
                    let started = NIODeadline.now()
                    try await writer.write(part)
                    sent += Int64(length)
                    try await eventLoop.submit {}.get()
                    watchdog.progress()
                    if NIODeadline.now() - started > slowWrite { slice = slowSliceLength }
                }
            }
            try await writer.finish(nil)
            finished = true
        }
    }

    private static func read(_ handle: ReadFileHandle, at offset: Int64, through last: Int64) async throws -> ByteBuffer {
        let chunk = try await handle.readChunk(fromAbsoluteOffset: offset, length: .bytes(min(chunkLength, last - offset + 1)))
        guard chunk.readableBytes > 0 else { throw ShortRead() }
        return chunk
    }
}
