import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// An HTTP server on 127.0.0.1 that answers every request with the head of a `length`-byte
/// 206 (`Content-Range: bytes 0-(length-1)/length`) and then sends one byte every `interval`:
/// an object store that trickles a body, each pause under any idle timeout.
public final class TrickleServer: Sendable {
    private let listener: SilentListener
    public var port: Int { listener.port }

    public init(length: Int, interval: Duration) throws {
        listener = try SilentListener()
        let fd = listener.descriptor
        let thread = Thread {
            while true {
                let client = accept(fd, nil, nil)
                guard client >= 0 else { return }  // the listener was closed
                Thread.detachNewThread {
                    defer { closeSocket(client) }
                    var request = [UInt8](repeating: 0, count: 4096)
                    _ = recv(client, &request, request.count, 0)
                    let head = "HTTP/1.1 206 Partial Content\r\nContent-Length: \(length)\r\nContent-Range: bytes 0-\(length - 1)/\(length)\r\n\r\n"
                    guard send(client, head, head.utf8.count, Int32(MSG_NOSIGNAL)) > 0 else { return }
                    let pause = UInt32(interval.components.seconds * 1_000_000 + interval.components.attoseconds / 1_000_000_000_000)
                    for _ in 0..<length {
                        usleep(pause)
                        var byte: UInt8 = 0x2A
                        guard send(client, &byte, 1, Int32(MSG_NOSIGNAL)) == 1 else { return }
                    }
                }
            }
        }
        thread.start()
    }

    /// Stops accepting (connections in progress end when their client goes).
    public func close() { listener.close() }
}

private func closeSocket(_ fd: Int32) { _ = close(fd) }
