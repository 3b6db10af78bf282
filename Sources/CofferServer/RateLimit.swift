import Foundation
import Hummingbird
import Synchronization

/// Token buckets per client address: `perMinute` tokens a minute, up to `burst` at once.
/// Memory is bounded: at most `maxClients` addresses are tracked. When a new address finds
/// the table full, one sweep drops every bucket that has refilled completely (an idle client
/// loses nothing by being forgotten); if that frees less than a tenth of the table, the
/// oldest tenth (least recently seen) goes too. Each sweep is O(n) and leaves room for at
/// least n/10 new addresses, so eviction costs amortised O(1) per new address.
final class RateLimiter: Sendable {
    struct Bucket {
        var tokens: Double
        var updated: Double
    }

    struct Table {
        var buckets: [String: Bucket] = [:]
        /// Sweeps done (for tests of the amortised cost).
        var sweeps = 0
    }

    let perMinute: Int
    let burst: Int
    let maxClients: Int
    private let table = Mutex(Table())

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
        return table.withLock { table -> Int? in
            var bucket = table.buckets[client] ?? Bucket(tokens: burst, updated: now)
            bucket.tokens = min(burst, bucket.tokens + (now - bucket.updated) * rate)
            bucket.updated = now
            let wait: Int?
            if bucket.tokens >= 1 {
                bucket.tokens -= 1
                wait = nil
            } else {
                wait = max(1, Int(((1 - bucket.tokens) / rate).rounded(.up)))
            }
            if table.buckets[client] == nil, table.buckets.count >= maxClients {
                Self.evict(&table, max: maxClients, now: now, rate: rate, burst: burst)
            }
            table.buckets[client] = bucket
            return wait
        }
    }

    var trackedClients: Int { table.withLock { $0.buckets.count } }
    var sweeps: Int { table.withLock { $0.sweeps } }

    private static func evict(_ table: inout Table, max: Int, now: Double, rate: Double, burst: Double) {
        table.sweeps += 1
        let before = table.buckets.count
        table.buckets = table.buckets.filter { $0.value.tokens + (now - $0.value.updated) * rate < burst }
        let tenth = Swift.max(1, max / 10)
        guard before - table.buckets.count < tenth, !table.buckets.isEmpty else { return }
        // Drop the least recently seen tenth: find the cut-off time in O(n) (quickselect).
        var times = table.buckets.values.map(\.updated)
        let drop = Swift.min(tenth, times.count)
        let cutoff = select(&times, rank: drop - 1)
        var dropped = 0
        table.buckets = table.buckets.filter { entry in
            guard entry.value.updated <= cutoff, dropped < drop else { return true }
            dropped += 1
            return false
        }
    }

    /// The `rank`-th smallest value (0-based) of `values`, reordering them: Hoare's
    /// quickselect with a middle pivot, expected O(n).
    static func select(_ values: inout [Double], rank: Int) -> Double {
        var low = 0
        var high = values.count - 1
        while low < high {
            let pivot = values[(low + high) / 2]
            var i = low
            var j = high
            while i <= j {
                while values[i] < pivot { i += 1 }
                while values[j] > pivot { j -= 1 }
                if i <= j {
                    values.swapAt(i, j)
                    i += 1
                    j -= 1
                }
            }
            if rank <= j {
                high = j
            } else if rank >= i {
                low = i
            } else {
                return values[rank]
            }
        }
        return values[rank]
    }
}

/// 429 `rateLimited` with `Retry-After` for routes a client may not hammer.
struct RateLimitMiddleware: RouterMiddleware {
    typealias Context = CofferRequestContext
    let limiter: RateLimiter
    let metrics: CofferMetrics
    /// The `route` label of `coffer_rate_limited_total`.
    var route = "redemption"

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        if let wait = limiter.take(context.clientAddress) {
            metrics.rateLimited(route: route)
            context.logger.notice("rate limited", metadata: ["route": "\(route)", "client": "\(context.clientAddress)", "retryAfter": "\(wait)"])
            throw Problem.rateLimited(wait)
        }
        return try await next(request, context)
    }
}

extension Problem {
    static func rateLimited(_ seconds: Int) -> Problem {
        Problem(.rateLimited, "too many requests from this address; retry in \(seconds) s", headers: [.retryAfter: String(seconds)])
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
