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

    /// Tokens a second.
    let rate: Double
    let burst: Int
    let maxClients: Int
    private let table = Mutex(Table())

    /// `perMinute` 0 disables the limiter.
    convenience init(perMinute: Int, burst: Int, maxClients: Int = 100_000) {
        self.init(perSecond: Double(max(0, perMinute)) / 60, burst: burst, maxClients: maxClients)
    }

    /// `perHour` tokens an hour, up to `burst` at once; 0 disables the limiter.
    convenience init(perHour: Int, burst: Int, maxClients: Int = 100_000) {
        self.init(perSecond: Double(max(0, perHour)) / 3600, burst: burst, maxClients: maxClients)
    }

    private init(perSecond: Double, burst: Int, maxClients: Int) {
        self.rate = perSecond
        self.burst = max(1, burst)
        self.maxClients = max(1, maxClients)
    }

    var enabled: Bool { rate > 0 }

    /// Takes one token for `client`; returns nil when allowed, else the seconds to wait.
    func take(_ client: String, now: Double = ProcessInfo.processInfo.systemUptime) -> Int? {
        guard enabled else { return nil }
        let rate = self.rate
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

    /// Gives back one token `client` took (what it was for did not happen), up to `burst`. A
    /// bucket full again is forgotten (as one never seen): a take and a give-back per
    /// redemption leave nothing behind.
    func giveBack(_ client: String) {
        guard enabled else { return }
        let burst = Double(self.burst)
        table.withLock { table in
            guard var bucket = table.buckets[client] else { return }
            bucket.tokens = min(burst, bucket.tokens + 1)
            table.buckets[client] = bucket.tokens >= burst ? nil : bucket
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
        if let wait = limiter.take(context.limitKey) {
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

/// A counting gate: at most `capacity` holders at once. ``enter()`` never waits (the caller
/// answers 503); ``enter(within:)`` waits its turn, first come first served, for a while. A
/// place given back goes to the first waiter, and ``enter()`` refuses while anyone waits.
final class Gate: Sendable {
    private struct Waiter {
        let id: UInt64
        let continuation: CheckedContinuation<Bool, Never>
    }

    private struct State {
        var holders = 0
        var waiters: [Waiter] = []
        var nextId: UInt64 = 0
        /// Each waiter's deadline, cancelled once it is answered.
        var timers: [UInt64: Task<Void, Never>] = [:]
    }

    let capacity: Int
    private let state = Mutex(State())

    init(capacity: Int) { self.capacity = max(1, capacity) }

    /// A place now, or false.
    func enter() -> Bool {
        state.withLock { state in
            guard state.holders < capacity, state.waiters.isEmpty else { return false }
            state.holders += 1
            return true
        }
    }

    /// A place, waiting behind earlier waiters for at most `wait`; false when none came free in
    /// time or the task was cancelled.
    func enter(within wait: Duration) async -> Bool {
        let id = state.withLock { state in
            defer { state.nextId &+= 1 }
            return state.nextId
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                enum Now { case entered, refused, waiting }
                let now = state.withLock { state -> Now in
                    if Task.isCancelled { return .refused }
                    if state.holders < capacity, state.waiters.isEmpty {
                        state.holders += 1
                        return .entered
                    }
                    state.waiters.append(Waiter(id: id, continuation: continuation))
                    return .waiting
                }
                switch now {
                case .entered: continuation.resume(returning: true)
                case .refused: continuation.resume(returning: false)
                case .waiting:
                    let timer = Task { [self] in
                        do { try await Task.sleep(for: wait) } catch { return }
                        giveUp(id)
                    }
                    let answered = state.withLock { state -> Bool in
                        guard state.waiters.contains(where: { $0.id == id }) else { return true }
                        state.timers[id] = timer
                        return false
                    }
                    if answered { timer.cancel() }
                }
            }
        } onCancel: {
            giveUp(id)
        }
    }

    /// Answers waiter `id` false, if it still waits.
    private func giveUp(_ id: UInt64) {
        let (waiter, timer) = state.withLock { state -> (Waiter?, Task<Void, Never>?) in
            guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return (nil, nil) }
            return (state.waiters.remove(at: index), state.timers.removeValue(forKey: id))
        }
        timer?.cancel()
        waiter?.continuation.resume(returning: false)
    }

    /// Gives a place back: to the first waiter, when there is one.
    func leave() {
        let (next, timer) = state.withLock { state -> (Waiter?, Task<Void, Never>?) in
            if !state.waiters.isEmpty {
                let first = state.waiters.removeFirst()
                return (first, state.timers.removeValue(forKey: first.id))
            }
            state.holders = max(0, state.holders - 1)
            return (nil, nil)
        }
        timer?.cancel()
        next?.continuation.resume(returning: true)
    }

    /// Holders now (tests wait on it instead of sleeping).
    var inUse: Int { state.withLock { $0.holders } }

    /// Waiters now.
    var waiting: Int { state.withLock { $0.waiters.count } }
}
