import CofferCore
import Foundation
import Hummingbird
import Logging
import Prometheus
import Synchronization

/// Coffer's Prometheus metrics, served at `GET /metrics`.
public final class CofferMetrics: Sendable {
    public let registry = PrometheusCollectorRegistry()
    let downloads: Counter
    let downloadBytes: Counter
    let verificationSeconds: DurationHistogram
    let downloadsInFlight: Gauge
    let downloadStalls: Counter
    let contentMismatches: Counter
    let bodyBytesReserved: Gauge
    let busy: Counter
    let auditInFlight: Gauge
    let auditBusy: Counter
    let refusalsUnrecorded: Counter

    public init() {
        downloads = registry.makeCounter(descriptor: Self.name("downloads_total", "Downloads served (including HEAD and ranges)"))
        downloadBytes = registry.makeCounter(descriptor: Self.name("download_bytes_total", "Asset bytes served"))
        downloadsInFlight = registry.makeGauge(descriptor: Self.name("downloads_in_flight", "Download bodies being streamed"))
        downloadStalls = registry.makeCounter(
            descriptor: Self.name("download_stalls_total", "Downloads closed because the client stopped reading for the stall timeout"))
        contentMismatches = registry.makeCounter(
            descriptor: Self.name(
                "content_mismatches_total",
                "Downloads cut short or refused because the store's object is not the one its SHA-256 names (changed in the store)"))
        bodyBytesReserved = registry.makeGauge(
            descriptor: Self.name("request_body_bytes_reserved", "Request-body bytes reserved from the in-flight body budget"))
        busy = registry.makeCounter(descriptor: Self.name("busy_total", "Requests refused with 503 busy (body budget spent)"))
        auditInFlight = registry.makeGauge(
            descriptor: Self.name("audit_requests_in_flight", "/v1/audit requests reading the database (an export while it reads a page)"))
        auditBusy = registry.makeCounter(
            descriptor: Self.name("audit_busy_total", "/v1/audit requests refused with 503 auditBusy (audit concurrency reached)"))
        refusalsUnrecorded = registry.makeCounter(
            descriptor: Self.name(
                "refusals_unrecorded_total",
                "Refusals not written to the ledger: a proof that did not verify beyond its address's --rate-recorded-refusals, or a verified purchase's beyond its own budget"
            ))
        verificationSeconds = registry.makeDurationHistogram(
            descriptor: Self.name("redemption_seconds", "Time to verify and redeem a purchase"),
            buckets: [
                .microseconds(250), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(100),
                .seconds(1),
            ])
    }

    static func name(_ metric: String, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(namespace: "coffer", metricName: metric, unitName: "", helpText: help)
    }

    func redemption(result: String) {
        counter(in: redemptions, "redemptions_total", "Redemption attempts by result code", label: "result", value: result).increment()
    }

    func rateLimited(route: String) {
        counter(in: rateLimits, "rate_limited_total", "Requests refused with 429 by route", label: "route", value: route).increment()
    }

    /// Labelled counters, kept by label value once made: the registry's `makeCounter` builds and
    /// validates the metric's name and takes the registry's lock on every call (once per
    /// redemption). The values come from fixed sets (result codes, routes); past `maxKept`
    /// the registry is asked each time.
    private func counter(in kept: borrowing Mutex<[String: Counter]>, _ metric: String, _ help: String, label: String, value: String) -> Counter {
        if let counter = kept.withLock({ $0[value] }) { return counter }
        let made = registry.makeCounter(descriptor: Self.name(metric, help), labels: [(label, value)])
        kept.withLock { if $0.count < Self.maxKept { $0[value] = made } }
        return made
    }

    private static let maxKept = 256
    private let redemptions = Mutex<[String: Counter]>([:])
    private let rateLimits = Mutex<[String: Counter]>([:])

    func render() -> String {
        var buffer: [UInt8] = []
        registry.emit(into: &buffer)
        return String(decoding: buffer, as: UTF8.self)
    }
}

/// Logs one line per request — method, path (download tokens redacted, see
/// ``PathPolicy/redacted(_:)``), status, duration — and never the Authorization header.
struct RequestLogMiddleware: RouterMiddleware {
    typealias Context = CofferRequestContext
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let start = ContinuousClock.now
        let response = try await next(request, context)
        let elapsed = ContinuousClock.now - start
        context.logger.info(
            "request",
            metadata: [
                "method": "\(request.method.rawValue)",
                "path": "\(Self.redacted(request.uri.path))",
                "status": "\(response.status.code)",
                "client": "\(context.clientAddress)",
                "ms": "\(Double(elapsed.components.attoseconds) / 1e15 + Double(elapsed.components.seconds) * 1000)",
            ])
        return response
    }

    /// The redacted path, at most 256 bytes of it (a request line may be 16 KiB: a flood of
    /// them would otherwise write the log one byte per byte received).
    static func redacted(_ path: String) -> String {
        let full = PathPolicy.redacted(path)
        let bytes = Array(full.utf8)
        guard bytes.count > 256 else { return full }
        // Cut before a whole character: never inside one's UTF-8 bytes.
        var end = 256
        while end > 0 && bytes[end] & 0xC0 == 0x80 { end -= 1 }
        return String(decoding: bytes[..<end], as: UTF8.self) + "…(\(bytes.count) bytes)"
    }
}
