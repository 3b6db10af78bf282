import CofferCore
import Hummingbird
import NIOCore

/// Per-request context: the caller's address and, once authenticated, their key.
public struct CofferRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    public var identity: APIKey?
    public let remoteAddress: String

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.identity = nil
        self.remoteAddress = source.channel.remoteAddress?.ipAddress ?? "unknown"
    }

    /// Bodies are collected explicitly with per-route limits.
    public var maxUploadSize: Int { 64 * 1024 }
}
