import CofferCore
import HTTPTypes
import Hummingbird
import NIOCore
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Per-request context: the caller's address and, once authenticated, their key.
public struct CofferRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    public var identity: APIKey?
    /// The TCP peer.
    public let peerAddress: String
    /// The client as far as Coffer can tell: the peer, or — when the peer is a configured
    /// trusted proxy — the nearest untrusted address in `X-Forwarded-For`.
    public var clientAddress: String
    /// ``clientAddress`` as the per-client limits count it (``IPAddress/limitKey(_:)``: an
    /// IPv6 client by its /64).
    public var limitKey: String { IPAddress.limitKey(clientAddress) }
    /// The connection's event loop: downloads pace their writes on it (`FileStream`).
    public var eventLoop: any EventLoop { channel.eventLoop }
    /// The connection: a stalled download closes it (`FileStream`).
    public let channel: any Channel
    /// The in-flight request-body budget (``ByteBudget``), set by ``BodyBudgetMiddleware``.
    var bodyBudget: ByteBudget?

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.identity = nil
        self.peerAddress = source.channel.remoteAddress?.ipAddress.map(IPAddress.normalized) ?? "unknown"
        self.clientAddress = peerAddress
        self.channel = source.channel
        self.bodyBudget = nil
    }

    /// Bodies are collected explicitly with per-route limits.
    public var maxUploadSize: Int { 64 * 1024 }
}

/// Resolves `clientAddress` behind reverse proxies. Only a peer listed in
/// `trustedProxies` may speak for someone else; its `X-Forwarded-For` is read right to left
/// and the first address that is not itself a trusted proxy is the client. A header from an
/// untrusted peer is ignored (anyone can write one).
///
/// Addresses are compared in one normal form (``IPAddress/normalized(_:)``) on both sides:
/// an IPv4-mapped IPv6 peer `::ffff:10.0.0.1` is the trusted proxy `10.0.0.1`, IPv6 hex case
/// and zero compression do not matter, and the client address that reaches the ledger and the
/// rate limiters is the normal form too.
struct ClientAddressMiddleware: RouterMiddleware {
    typealias Context = CofferRequestContext
    let trustedProxies: Set<String>
    /// Set once the misconfiguration below was logged.
    let warned = WarnedOnce()

    final class WarnedOnce: Sendable {
        private let flag = Atomic<Bool>(false)
        /// True the first time only.
        func first() -> Bool { !flag.exchange(true, ordering: .relaxed) }
    }

    init(trustedProxies: Set<String>) {
        self.trustedProxies = Set(trustedProxies.map(IPAddress.normalized))
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        let forwardedFor = request.headers[values: .xForwardedFor]
        context.clientAddress = Self.client(peer: context.peerAddress, forwardedFor: forwardedFor, trusted: trustedProxies)
        // A proxy on this host that Coffer does not trust: every client behind it is one
        // address, and one of them exhausts the rate limits for all. (Only a loopback peer
        // warns: anyone elsewhere can send the header.)
        if !forwardedFor.isEmpty, context.clientAddress == context.peerAddress, IPAddress.isLoopback(context.peerAddress),
            !trustedProxies.contains(context.peerAddress), warned.first()
        {
            context.logger.warning(
                "a proxy on this host sends X-Forwarded-For but is not a trusted proxy: every client behind it shares its address and its rate limits; set COFFER_TRUSTED_PROXIES (or --trusted-proxy)",
                metadata: ["peer": "\(context.peerAddress)"])
        }
        return try await next(request, context)
    }

    /// `trusted` may be given in any spelling; the answer is in normal form.
    static func client(peer: String, forwardedFor: [String], trusted: Set<String>) -> String {
        let peer = IPAddress.normalized(peer)
        let trusted = Set(trusted.map(IPAddress.normalized))
        guard trusted.contains(peer) else { return peer }
        let hops = forwardedFor.flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }
        var client = peer
        for hop in hops.reversed() {
            // Only an address literal, as a proxy writes them: never a free-form string into the ledger.
            guard let address = IPAddress.parse(hop) else { return client }
            client = address
            if !trusted.contains(address) { return address }
        }
        return client
    }
}

/// IP address literals in one normal form.
public enum IPAddress {
    /// The normal form of an IPv4 or IPv6 literal: IPv4 dotted quad; IPv6 as `inet_ntop`
    /// writes it (lowercase hex, longest zero run compressed); an IPv4-mapped IPv6 address
    /// (`::ffff:a.b.c.d`) as its IPv4 address. Nil when `text` is not an address literal.
    public static func parse(_ text: String) -> String? {
        guard (2...45).contains(text.utf8.count), text.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return nil }
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 { return ntop(AF_INET, &v4) }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, text, &v6) == 1 else { return nil }
        let bytes = withUnsafeBytes(of: &v6) { Array($0) }
        if bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xFF, bytes[11] == 0xFF {
            return "\(bytes[12]).\(bytes[13]).\(bytes[14]).\(bytes[15])"
        }
        return ntop(AF_INET6, &v6)
    }

    /// What the per-client limits (rate limits, download slots, failed-key throttle) count an
    /// address as: an IPv4 address itself; an IPv6 address by its /64 — the smallest prefix a
    /// home or a cloud host is given, whose 2^64 addresses one client can all use (counted one
    /// by one, the limits would not limit) — except where the /64 is not one client's: an
    /// IPv4 address carried in IPv6 (NAT64 `64:ff9b::/96`, 6to4 `2002::/16`, Teredo
    /// `2001::/32`) counts as that IPv4 address, and link-local, loopback and IPv4-compatible
    /// addresses as themselves. `address` in normal form (``parse(_:)``).
    public static func limitKey(_ address: String) -> String {
        var v6 = in6_addr()
        guard address.contains(":"), inet_pton(AF_INET6, address, &v6) == 1 else { return address }
        let b = withUnsafeBytes(of: &v6) { Array($0) }
        func v4(_ x: UInt8, _ y: UInt8, _ z: UInt8, _ w: UInt8) -> String { "\(x).\(y).\(z).\(w)" }
        if b[0..<12].allSatisfy({ $0 == 0 }) || (b[0] == 0xFE && b[1] & 0xC0 == 0x80) { return address }
        if b[0..<12].elementsEqual([0, 0x64, 0xFF, 0x9B, 0, 0, 0, 0, 0, 0, 0, 0]) { return v4(b[12], b[13], b[14], b[15]) }
        if b[0] == 0x20, b[1] == 0x02 { return v4(b[2], b[3], b[4], b[5]) }
        if b[0..<4].elementsEqual([0x20, 0x01, 0, 0]) { return v4(~b[12], ~b[13], ~b[14], ~b[15]) }
        withUnsafeMutableBytes(of: &v6) { bytes in
            for i in 8..<16 { bytes[i] = 0 }
        }
        return (ntop(AF_INET6, &v6) ?? address) + "/64"
    }

    /// Whether `address` (in normal form, ``parse(_:)``) is a loopback address: `127.0.0.0/8` or `::1`.
    static func isLoopback(_ address: String) -> Bool { address.hasPrefix("127.") || address == "::1" }

    /// ``parse(_:)``, or — for what is not a literal (a peer NIO describes otherwise, e.g. with
    /// a zone) — the text lowercased.
    static func normalized(_ text: String) -> String { parse(text) ?? text.lowercased() }

    private static func ntop<T>(_ family: Int32, _ address: inout T) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        let written = withUnsafePointer(to: &address) { pointer in
            buffer.withUnsafeMutableBufferPointer { inet_ntop(family, pointer, $0.baseAddress, socklen_t($0.count)) }
        }
        guard written != nil else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

extension HTTPField.Name {
    static let xForwardedFor = HTTPField.Name("X-Forwarded-For")!
}
