import Foundation
import Hummingbird
import Synchronization

/// Token buckets per client address: `perMinute` tokens a minute, up to `burst` at once.
/// Memory is bounded: at most `maxClients` addresses are tracked; when full, buckets that
/// have refilled completely (idle clients) are dropped first, then the oldest.
final class RateLimiter: Sendable {
    struct Bucket {
        var tokens: Double
        var updated: Double
    }

    let perMinute: Int
    let burst: Int
    let maxClients: Int
    private let buckets = Mutex<[String: Bucket]>([:])

    /// `perMinute` 0 disables the limiter.
    init(perMinute: Int, burst: Int, maxClients: Int = 100_000) {
        self.perMinute = perMinute
        self.burst = max(1, burst)
        self.maxClients = max(1, maxClients)
    }

    var enabled: Bool { perMinute > 0 }

    /// Takes one token for `client`; returns nil when allowed, else the seconds to wait.
    func take(_ client: String, now: Double = ProcessInfo.processInfo.systemUptime) -> Int? {
        guard enabled else { return nil }
        let rate = Double(perMinute) / 60
        let burst = Double(self.burst)
        return buckets.withLock { table -> Int? in
            var bucket = table[client] ?? Bucket(tokens: burst, updated: now)
            bucket.tokens = min(burst, bucket.tokens + (now - bucket.updated) * rate)
            bucket.updated = now
            if bucket.tokens >= 1 {
                bucket.tokens -= 1
                if table[client] == nil, table.count >= maxClients { Self.evict(&table, now: now, rate: rate, burst: burst) }
                table[client] = bucket
                return nil
            }
            table[client] = bucket
            return max(1, Int(((1 - bucket.tokens) / rate).rounded(.up)))
        }
    }

    /// Whether `client` has a token left, without taking one.
    func wouldAllow(_ client: String, now: Double = ProcessInfo.processInfo.systemUptime) -> Int? {
        guard enabled else { return nil }
        let rate = Double(perMinute) / 60
        return buckets.withLock { table -> Int? in
            guard let bucket = table[client] else { return nil }
            let tokens = min(Double(burst), bucket.tokens + (now - bucket.updated) * rate)
            return tokens >= 1 ? nil : max(1, Int(((1 - tokens) / rate).rounded(.up)))
        }
    }

    var trackedClients: Int { buckets.withLock { $0.count } }

    private static func evict(_ table: inout [String: Bucket], now: Double, rate: Double, burst: Double) {
        let before = table.count
        table = table.filter { $0.value.tokens + (now - $0.value.updated) * rate < burst }
        if table.count == before, let oldest = table.min(by: { $0.value.updated < $1.value.updated })?.key {
            table.removeValue(forKey: oldest)
        }
    }
}

/// 429 `rateLimited` with `Retry-After` for routes a client may not hammer.
struct RateLimitMiddleware: RouterMiddleware {
    typealias Context = CofferRequestContext
    let limiter: RateLimiter
    let metrics: CofferMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        if let wait = limiter.take(context.clientAddress) {
            metrics.rateLimited(route: "redemption")
            throw Problem.rateLimited(wait)
        }
        return try await next(request, context)
    }
}

extension Problem {
    static func rateLimited(_ seconds: Int) -> Problem {
        Problem(
            .tooManyRequests, "rateLimited", "too many requests from this address; retry in \(seconds) s", headers: [.retryAfter: String(seconds)])
    }
}

/// A counting gate: at most `capacity` holders at once, no waiting (the caller answers 503).
final class Gate: Sendable {
    let capacity: Int
    private let holders = Mutex(0)

    init(capacity: Int) { self.capacity = max(1, capacity) }

    func enter() -> Bool {
        holders.withLock { n in
            guard n < capacity else { return false }
            n += 1
            return true
        }
    }

    func leave() { holders.withLock { $0 = max(0, $0 - 1) } }

    /// Holders now (tests wait on it instead of sleeping).
    var inUse: Int { holders.withLock { $0 } }
}
