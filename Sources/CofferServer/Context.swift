import CofferCore
import HTTPTypes
import Hummingbird
import NIOCore

/// Per-request context: the caller's address and, once authenticated, their key.
public struct CofferRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    public var identity: APIKey?
    /// The TCP peer.
    public let peerAddress: String
    /// The client as far as Coffer can tell: the peer, or — when the peer is a configured
    /// trusted proxy — the nearest untrusted address in `X-Forwarded-For`.
    public var clientAddress: String
    /// The connection's event loop: downloads pace their writes on it (`FileStream`).
    public let eventLoop: any EventLoop

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.identity = nil
        self.peerAddress = source.channel.remoteAddress?.ipAddress ?? "unknown"
        self.clientAddress = peerAddress
        self.eventLoop = source.channel.eventLoop
    }

    /// Bodies are collected explicitly with per-route limits.
    public var maxUploadSize: Int { 64 * 1024 }
}

/// Resolves `clientAddress` behind reverse proxies. Only a peer listed in
/// `trustedProxies` may speak for someone else; its `X-Forwarded-For` is read right to left
/// and the first address that is not itself a trusted proxy is the client. A header from an
/// untrusted peer is ignored (anyone can write one).
struct ClientAddressMiddleware: RouterMiddleware {
    typealias Context = CofferRequestContext
    let trustedProxies: Set<String>

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        context.clientAddress = Self.client(peer: context.peerAddress, forwardedFor: request.headers[values: .xForwardedFor], trusted: trustedProxies)
        return try await next(request, context)
    }

    static func client(peer: String, forwardedFor: [String], trusted: Set<String>) -> String {
        guard trusted.contains(peer) else { return peer }
        let hops = forwardedFor.flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }
        var client = peer
        for hop in hops.reversed() {
            guard isAddressLiteral(hop) else { return client }
            client = hop
            if !trusted.contains(hop) { return hop }
        }
        return client
    }

    /// IPv4 or IPv6 literal characters only, as a proxy writes them: never a free-form string
    /// into the ledger.
    static func isAddressLiteral(_ s: String) -> Bool {
        (2...45).contains(s.utf8.count)
            && s.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x3A) || ($0 >= 0x61 && $0 <= 0x66) || ($0 >= 0x41 && $0 <= 0x46) || $0 == 0x2E }
    }
}

extension HTTPField.Name {
    static let xForwardedFor = HTTPField.Name("X-Forwarded-For")!
}
