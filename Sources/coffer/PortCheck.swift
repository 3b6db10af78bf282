import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Fails early, with one clear line, when the listen address is taken: before the demo
/// prints its banner or the server opens storage (the server's own bind error comes last and
/// reads `bind(descriptor:ptr:bytes:): Address already in use) (errno: 98)`).
enum PortCheck {
    static func ensureFree(host: String, port: Int) throws {
        guard (0...65535).contains(port), port != 0 else { return }
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_PASSIVE
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &list) == 0, let first = list else { return }  // the server reports a bad host
        defer { freeaddrinfo(list) }
        var next: UnsafeMutablePointer<addrinfo>? = first
        while let info = next {
            next = info.pointee.ai_next
            let fd = socket(info.pointee.ai_family, info.pointee.ai_socktype, info.pointee.ai_protocol)
            guard fd >= 0 else { continue }
            defer { close(fd) }
            var one: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
            if bind(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) != 0, errno == EADDRINUSE {
                throw UsageError("\(host):\(port) is already in use (another coffer serve?): stop it or pick another port with --port")
            }
        }
    }
}
