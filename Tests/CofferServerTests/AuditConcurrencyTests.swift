import CofferApp
import CofferCore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Synchronization
import Testing

@testable import CofferServer

/// A ledger whose audit pages (`redemptions(_:)`) can be held until the test lets them go:
/// `passing` calls go through first — the first of them answered with a full page of copies
/// of the ledger's first redemption, so that an export asks for a second page — then every
/// call waits for ``release()``. Everything else is the wrapped ledger's.
final class HeldLedger: LedgerRepository {
    private struct State {
        var calls = 0
        var released = false
        var waiting: [CheckedContinuation<Void, Never>] = []
    }

    let base: any LedgerRepository
    let passing: Int
    /// Every call answers a full page (an export that never ends); nothing is held.
    let endless: Bool
    private let state = Mutex(State())

    init(_ base: any LedgerRepository, passing: Int = 0, endless: Bool = false) {
        self.base = base
        self.passing = passing
        self.endless = endless
    }

    /// Calls waiting now.
    var held: Int { state.withLock { $0.waiting.count } }

    /// Calls of `redemptions(_:)` so far.
    var calls: Int { state.withLock { $0.calls } }

    func release() {
        let waiting = state.withLock { state in
            state.released = true
            defer { state.waiting = [] }
            return state.waiting
        }
        for continuation in waiting { continuation.resume() }
    }

    func redemptions(_ filter: AuditFilter) async throws -> [Redemption] {
        let call = state.withLock { state in
            state.calls += 1
            return state.calls
        }
        if endless || (call == 1 && passing > 0) {
            let first = try await base.redemptions(AuditFilter())
            return first.isEmpty ? [] : Array(repeating: first[0], count: filter.limit)
        }
        if call > passing {
            await withCheckedContinuation { continuation in
                let go = state.withLock { state -> Bool in
                    if state.released { return true }
                    state.waiting.append(continuation)
                    return false
                }
                if go { continuation.resume() }
            }
            return []
        }
        return try await base.redemptions(filter)
    }

    func insert(_ redemption: Redemption, refusals: InsertRefusals?) async throws -> LedgerInsertOutcome {
        try await base.insert(redemption, refusals: refusals)
    }
    func record(_ attempt: RejectedAttempt) async throws { try await base.record(attempt) }
    func redemption(grantHash: String) async throws -> Redemption? { try await base.redemption(grantHash: grantHash) }
    func attempts(_ filter: AuditFilter) async throws -> [RejectedAttempt] { try await base.attempts(filter) }
    func hourlyCounts(from: Date, to: Date) async throws -> [HourlyCount] { try await base.hourlyCounts(from: from, to: to) }
    func revoke(_ revocation: Revocation, keepUnredeemed: Bool, logging: AdminAction?) async throws -> RevocationOutcome {
        try await base.revoke(revocation, keepUnredeemed: keepUnredeemed, logging: logging)
    }
    func revocation(of redemption: Redemption) async throws -> Revocation? { try await base.revocation(of: redemption) }
    func revocation(environment: String, replayKey: String) async throws -> Revocation? {
        try await base.revocation(environment: environment, replayKey: replayKey)
    }
    func revocations(after: Int64, limit: Int) async throws -> [Revocation] { try await base.revocations(after: after, limit: limit) }
    func redemption(environment: String, replayKey: String) async throws -> Redemption? {
        try await base.redemption(environment: environment, replayKey: replayKey)
    }
    func append(_ event: PurchaseEvent, logging: AdminAction?) async throws -> PurchaseEventOutcome {
        try await base.append(event, logging: logging)
    }
    func purchaseEvents(environment: String, replayKey: String) async throws -> [PurchaseEvent] {
        try await base.purchaseEvents(environment: environment, replayKey: replayKey)
    }
    func purchaseEvents(after: Int64, limit: Int) async throws -> [PurchaseEvent] { try await base.purchaseEvents(after: after, limit: limit) }
}

/// `/v1/audit` requests in progress per instance are limited (`auditConcurrency`): an
/// auditor's key cannot hold every database connection that redemptions need.
@Suite(.serialized) struct AuditConcurrencyTests {
    static func application(_ h: Harness, ledger: HeldLedger) -> some ApplicationProtocol {
        var dependencies = h.services.dependencies
        dependencies.ledger = ledger
        dependencies.deliveries = h.deliveries
        var logger = Logger(label: "coffer-test")
        logger.logLevel = .warning
        return buildApplication(h.services.configuration, dependencies: dependencies, runtime: h.runtime, logger: logger)
    }

    static func get(_ path: String, key: String, port: Int) async throws -> RawConnection {
        let c = try RawConnection(port: port)
        await c.send("GET \(path) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(key)\r\n\r\n")
        return c
    }

    /// Two audit reads held in the database take both places: a third audit request is 503
    /// `auditBusy` with `Retry-After: 1` (before it reaches the database), while redemptions
    /// and unauthenticated requests are answered as ever; once the reads finish, their places
    /// are free again.
    @Test func auditRequestsBeyondTheLimitAre503WhileRedemptionsGoOn() async throws {
        let h = try await Harness.make(configure: { $0.auditConcurrency = 2 })
        defer { h.cleanUp() }
        let ledger = HeldLedger(h.services.ledger)
        try await Self.application(h, ledger: ledger).test(.live) { client in
            let port = try #require(client.port)
            let first = try await Self.get("/v1/audit/redemptions", key: h.auditorKey, port: port)
            let second = try await Self.get("/v1/audit/redemptions?productId=\(Harness.product)", key: h.adminKey, port: port)
            #expect(await eventually(seconds: 20) { ledger.held == 2 })
            #expect(h.runtime.auditsInProgress == 2)

            let busy = try await client.execute(uri: "/v1/audit/checkpoints", method: .get, headers: h.bearer(h.auditorKey))
            #expect(busy.status == .serviceUnavailable)
            #expect(Harness.code(busy) == "auditBusy")
            #expect(busy.headers[.retryAfter] == "1")
            // The key is checked before a place is taken: no key is still 401.
            let anonymous = try await client.execute(uri: "/v1/audit/checkpoints", method: .get)
            #expect(anonymous.status == .unauthorized)
            // Players are answered meanwhile (the gate refuses audits, nothing else).
            let redeemed = try await client.execute(
                uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["receipt": try Harness.receipt("77")]))
            #expect(redeemed.status == .created)
            let metrics = String(buffer: try await client.execute(uri: "/metrics", method: .get).body)
            #expect(metricValue(metrics, "coffer_audit_busy_total") == 1)
            #expect(metricValue(metrics, "coffer_audit_requests_in_flight") == 2)

            ledger.release()
            #expect(await first.receive(seconds: 10).hasPrefix("HTTP/1.1 200"))
            #expect(await second.receive(seconds: 10).hasPrefix("HTTP/1.1 200"))
            #expect(await eventually(seconds: 20) { h.runtime.auditsInProgress == 0 })
            let after = try await client.execute(uri: "/v1/audit/checkpoints", method: .get, headers: h.bearer(h.auditorKey))
            #expect(after.status == .ok)
        }
    }

    /// An export keeps its place while it reads a later page, not only while its handler
    /// runs; a client that goes away mid-export gives it back once the stream ends.
    @Test func anExportHoldsItsPlaceWhileItReadsAPage() async throws {
        let h = try await Harness.make(configure: { $0.auditConcurrency = 1 })
        defer { h.cleanUp() }
        let ledger = HeldLedger(h.services.ledger, passing: 1)
        try await Self.application(h, ledger: ledger).test(.live) { client in
            let port = try #require(client.port)
            let redeemed = try await client.execute(
                uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["receipt": try Harness.receipt("78")]))
            #expect(redeemed.status == .created)
            // The first page (500 rows) goes out with the 200; the second is held.
            let export = try await Self.get("/v1/audit/export?format=ndjson", key: h.auditorKey, port: port)
            #expect(await eventually(seconds: 20) { ledger.held == 1 })
            let head = await export.readHead(seconds: 10)
            #expect(head.hasPrefix("HTTP/1.1 200"), "\(head.prefix(120))")
            #expect(h.runtime.auditsInProgress == 1, "the handler has returned; the body reads its second page")
            let busy = try await client.execute(uri: "/v1/audit/public-key", method: .get, headers: h.bearer(h.auditorKey))
            #expect(busy.status == .serviceUnavailable && Harness.code(busy) == "auditBusy")

            // The client goes away; the place is given back when the stream ends.
            shutdown(export.fd, Int32(SHUT_RDWR))
            ledger.release()
            #expect(await eventually(seconds: 20) { h.runtime.auditsInProgress == 0 })
            let after = try await client.execute(uri: "/v1/audit/public-key", method: .get, headers: h.bearer(h.auditorKey))
            #expect(after.status == .ok)
        }
    }

    /// Exports whose clients read nothing hold no place (other audit requests are answered),
    /// and no more than twice the places stream at once: the next export is 503 `auditBusy`
    /// before its 200.
    @Test func slowReadersHoldNoPlaceAndExportsStreamTwiceThePlacesAtMost() async throws {
        let h = try await Harness.make(configure: { $0.auditConcurrency = 1 })
        defer { h.cleanUp() }
        let ledger = HeldLedger(h.services.ledger, endless: true)
        try await Self.application(h, ledger: ledger).test(.live) { client in
            let port = try #require(client.port)
            let redeemed = try await client.execute(
                uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: try Harness.body(["receipt": try Harness.receipt("79")]))
            #expect(redeemed.status == .created)
            // Two exports that never end, to clients that read nothing: their writes stop once
            // the connections' buffers are full.
            var stalled: [RawConnection] = []
            for _ in 0..<2 {
                stalled.append(try await Self.get("/v1/audit/export?format=ndjson", key: h.auditorKey, port: port))
                // Stalled: no page read for 300 ms (a stream still writing reads hundreds a second).
                #expect(
                    await eventually(seconds: 60) {
                        let before = ledger.calls
                        try? await Task.sleep(for: .milliseconds(300))
                        return ledger.calls == before && h.runtime.auditStreamsInProgress == stalled.count && h.runtime.auditsInProgress == 0
                    })
            }
            // (A raw connection: were the third let in, its export would never end.)
            let third = try await Self.get("/v1/audit/export?format=csv", key: h.auditorKey, port: port)
            let head = await third.readHead(seconds: 20).lowercased()
            #expect(head.hasPrefix("http/1.1 503") && head.contains("retry-after: 1"), "\(head.prefix(200))")
            let page = try await client.execute(uri: "/v1/audit/revocations", method: .get, headers: h.bearer(h.auditorKey))
            #expect(page.status == .ok, "the place is free while the exports' clients read nothing")
            // Closed with unread data, the connections are reset: the stalled writes fail.
            stalled.removeAll()
            #expect(await eventually(seconds: 60) { h.runtime.auditStreamsInProgress == 0 && h.runtime.auditsInProgress == 0 })
        }
    }

    /// A streamed answer holds no place while its client reads a chunk: another audit request
    /// gets it; the stream's next page then waits its turn, ahead of new requests.
    @Test func aStreamHoldsNoPlaceWhileItsClientReads() async throws {
        let gate = Gate(capacity: 1)
        let place = try #require(AuditPlace(gate, metrics: nil))
        let client = SlowClient()
        let streaming = Task {
            var writer = AuditPlaceWriter(base: client, place: place, wait: .seconds(60))
            try await writer.write(ByteBuffer(string: "page 1"))
            return gate.inUse
        }
        #expect(await eventually(seconds: 20) { client.reading })
        #expect(gate.inUse == 0, "the place is free while the client reads")
        let other = try #require(AuditPlace(gate, metrics: nil), "another audit request takes it")
        client.finishReading()
        #expect(await eventually(seconds: 20) { gate.waiting == 1 }, "the stream waits for its next page")
        other.leave()
        #expect(AuditPlace(gate, metrics: nil) == nil, "the place went to the waiting stream, not to a new request")
        #expect(try await streaming.value == 1, "the stream holds the place again")
        place.leave()
        place.leave()
        #expect(gate.inUse == 0 && gate.waiting == 0)
    }

    /// A wait for a place ends false when none comes free in time or its task is cancelled,
    /// and leaves nothing behind; a paused place that cannot come back is ``AuditPlace/Busy``.
    @Test func aWaitForAPlaceEndsWhenNoneComesOrItIsCancelled() async throws {
        let gate = Gate(capacity: 1)
        #expect(gate.enter())
        #expect(await gate.enter(within: .milliseconds(50)) == false)
        #expect(gate.waiting == 0)
        let cancelled = Task { await gate.enter(within: .seconds(600)) }
        #expect(await eventually(seconds: 20) { gate.waiting == 1 })
        cancelled.cancel()
        #expect(await cancelled.value == false)
        #expect(gate.waiting == 0 && gate.inUse == 1)
        gate.leave()

        let place = try #require(AuditPlace(gate, metrics: nil))
        place.pause()
        #expect(gate.enter())
        await #expect(throws: AuditPlace.Busy.self) { try await place.resume(within: .milliseconds(50)) }
        gate.leave()
        #expect(gate.inUse == 0)
    }
}

/// A client that takes its time reading one chunk: ``write(_:)`` returns once
/// ``finishReading()`` is called.
final class SlowClient: ResponseBodyWriter, Sendable {
    private struct State {
        var reading = false
        var done = false
        var waiting: CheckedContinuation<Void, Never>?
    }

    private let state = Mutex(State())

    var reading: Bool { state.withLock { $0.reading } }

    func write(_ buffer: ByteBuffer) async throws {
        await withCheckedContinuation { continuation in
            let done = state.withLock { state -> Bool in
                state.reading = true
                if state.done { return true }
                state.waiting = continuation
                return false
            }
            if done { continuation.resume() }
        }
    }

    func finishReading() {
        let waiting = state.withLock { state in
            state.done = true
            defer { state.waiting = nil }
            return state.waiting
        }
        waiting?.resume()
    }

    func finish(_ trailingHeaders: HTTPFields?) async throws {}
}
