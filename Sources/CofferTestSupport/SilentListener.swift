import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A TCP listener on 127.0.0.1 that never accepts: connections complete in the kernel's
/// backlog and requests are never answered — a stalled object store.
public final class SilentListener: Sendable {
    let fd: Int32
    public let port: Int
    /// The listening socket (for a server built on it).
    public var descriptor: Int32 { fd }

    public init() throws {
        let fd = socket(AF_INET, socketStream, 0)
        guard fd >= 0 else { throw MotoServer.Failure("socket() failed") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = in_addr_t(0x7F00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
        guard bound == 0, listen(fd, 64) == 0 else {
            closeDescriptor(fd)
            throw MotoServer.Failure("bind/listen failed")
        }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        self.fd = fd
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    public func close() {
        shutdownDescriptor(fd)
        closeDescriptor(fd)
    }

    /// Closes the listener and returns its port, where nothing listens now.
    public func closedPort() -> Int {
        close()
        return port
    }
}

private func closeDescriptor(_ fd: Int32) { _ = close(fd) }
/// Wakes a thread blocked in `accept` on it.
private func shutdownDescriptor(_ fd: Int32) { _ = shutdown(fd, Int32(SHUT_RDWR)) }

#if canImport(Darwin)
    private let socketStream = SOCK_STREAM
#else
    private let socketStream = Int32(SOCK_STREAM.rawValue)
#endif
