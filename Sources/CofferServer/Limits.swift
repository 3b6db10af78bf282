import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOHTTPTypes
import Synchronization

/// A server-wide budget of bytes (request bodies being collected): reservations succeed
/// while the total stays within `capacity`, else the caller answers 503 `busy`. One client
/// (its ``CofferRequestContext/limitKey``) holds at most `perClient` of it, else 429: a
/// client sending many slow bodies at once would otherwise spend the budget for everyone.
final class ByteBudget: Sendable {
    let capacity: Int
    let perClient: Int
    private let state = Mutex(State())
    private let metrics: CofferMetrics?

    private struct State {
        var used = 0
        /// What each client holds now; a client holding nothing is removed.
        var byClient: [String: Int] = [:]
    }

    enum Refusal: Error {
        /// The budget is spent: 503.
        case spent
        /// This client holds its share: 429.
        case clientShare
    }

    /// `perClient`: by default a quarter of `capacity`.
    init(capacity: Int, perClient: Int? = nil, metrics: CofferMetrics? = nil) {
        self.capacity = max(0, capacity)
        self.perClient = min(self.capacity, max(0, perClient ?? self.capacity / 4))
        self.metrics = metrics
    }

    /// Takes `bytes` from the budget for `client`; nil when taken, else why not (nothing taken).
    func reserve(_ bytes: Int, client: String) -> Refusal? {
        guard bytes > 0 else { return nil }
        let refusal = state.withLock { state -> Refusal? in
            guard bytes <= capacity - state.used else { return .spent }
            let held = state.byClient[client, default: 0]
            guard bytes <= perClient - held else { return .clientShare }
            state.used += bytes
            state.byClient[client] = held + bytes
            return nil
        }
        switch refusal {
        case nil: metrics?.bodyBytesReserved.increment(by: Double(bytes))
        case .spent?: metrics?.busy.increment()
        case .clientShare?: metrics?.rateLimited(route: "bodies")
        }
        return refusal
    }

    func release(_ bytes: Int, client: String) {
        guard bytes > 0 else { return }
        state.withLock { state in
            state.used = max(0, state.used - bytes)
            let held = state.byClient[client, default: 0] - bytes
            state.byClient[client] = held > 0 ? held : nil
        }
        metrics?.bodyBytesReserved.decrement(by: Double(bytes))
    }

    var inUse: Int { state.withLock { $0.used } }
    /// Clients holding a part of the budget now.
    var clients: Int { state.withLock { $0.byClient.count } }
}

/// What one request body holds of a ``ByteBudget``: reserved as the body is declared or
/// arrives, all of it released once (``release()``; the owner calls it in a `defer`, so error,
/// timeout and cancellation paths release too).
final class BodyReservation: Sendable {
    private let budget: ByteBudget?
    private let client: String
    private let held = Mutex(0)

    init(_ budget: ByteBudget?, client: String) {
        self.budget = budget
        self.client = client
    }

    /// Nil when reserved, else why not.
    func reserve(_ bytes: Int) -> ByteBudget.Refusal? {
        guard let budget else { return nil }
        if let refusal = budget.reserve(bytes, client: client) { return refusal }
        held.withLock { $0 += bytes }
        return nil
    }

    func release() {
        let bytes = held.withLock { held -> Int in
            defer { held = 0 }
            return held
        }
        budget?.release(bytes, client: client)
    }

    deinit { release() }
}

extension Problem {
    /// 503 `busy`: the in-flight request-body budget is spent.
    static func busy(_ seconds: Int = 2) -> Problem {
        Problem(
            .busy, "the server is receiving too many request bodies at once; retry in \(seconds) s",
            headers: [.retryAfter: String(seconds)])
    }

    /// 429 `rateLimited`: this client's bodies in progress hold its share of the budget.
    static func bodiesInProgress(_ seconds: Int = 2) -> Problem {
        Problem(
            .rateLimited, "too many request bodies in progress from this address; retry in \(seconds) s",
            headers: [.retryAfter: String(seconds)])
    }
}

/// Gives every request the application's request-body budget (``JSON/decode(_:from:context:limit:timeout:)`` reserves from it).
struct BodyBudgetMiddleware: RouterMiddleware {
    typealias Context = CofferRequestContext
    let budget: ByteBudget

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        context.bodyBudget = budget
        return try await next(request, context)
    }
}

/// Downloads in progress per client address (``CofferConfiguration/maxDownloadsPerAddress``),
/// and four times as many per purchase (its redemption, from every address together): a token works from
/// any address, so one purchase's tokens spread over a hundred addresses would otherwise hold
/// a hundred times the slots, each a socket, a file and a megabyte of buffers for as long as
/// its reader takes. A slot is held from the moment a streamed response is created until its
/// body ends — or, if the body never runs, until the response is dropped (``DownloadSlot``
/// releases on deinit).
final class DownloadSlots: Sendable {
    /// 0: unlimited (still counted, for the `coffer_downloads_in_flight` gauge).
    let perAddress: Int
    /// Four times `perAddress`: a player whose phone moved from Wi-Fi to a mobile network keeps
    /// the old address's downloads counted until they stall out, and retries from the new one.
    var perPurchase: Int { perAddress * 4 }
    struct Counts {
        var byAddress: [String: Int] = [:]
        var byRedemption: [String: Int] = [:]
    }
    private let counts = Mutex(Counts())
    private let metrics: CofferMetrics?

    init(perAddress: Int, metrics: CofferMetrics? = nil) {
        self.perAddress = max(0, perAddress)
        self.metrics = metrics
    }

    /// Why a slot was refused.
    enum Refusal: Error { case address, purchase }

    /// A slot for `address` and the purchase `redemptionId`, or why not: the address already
    /// has `perAddress` downloads in progress, or the purchase `perPurchase`.
    func acquire(_ address: String, redemptionId: String) -> Result<DownloadSlot, Refusal> {
        let refusal = counts.withLock { counts -> Refusal? in
            let byAddress = counts.byAddress[address, default: 0]
            let byRedemption = counts.byRedemption[redemptionId, default: 0]
            if perAddress > 0 && byAddress >= perAddress { return .address }
            if perAddress > 0 && byRedemption >= perPurchase { return .purchase }
            counts.byAddress[address] = byAddress + 1
            counts.byRedemption[redemptionId] = byRedemption + 1
            return nil
        }
        if let refusal { return .failure(refusal) }
        metrics?.downloadsInFlight.increment()
        return .success(DownloadSlot(slots: self, address: address, redemptionId: redemptionId))
    }

    fileprivate func release(_ address: String, _ redemptionId: String) {
        counts.withLock { counts in
            let n = counts.byAddress[address, default: 0] - 1
            counts.byAddress[address] = n > 0 ? n : nil
            let r = counts.byRedemption[redemptionId, default: 0] - 1
            counts.byRedemption[redemptionId] = r > 0 ? r : nil
        }
        metrics?.downloadsInFlight.decrement()
    }

    /// Downloads in progress for `address` (all addresses when nil).
    func inProgress(_ address: String? = nil) -> Int {
        counts.withLock { counts in address.map { counts.byAddress[$0, default: 0] } ?? counts.byAddress.values.reduce(0, +) }
    }

    /// Downloads in progress of the purchase `redemptionId`.
    func inProgress(redemptionId: String) -> Int { counts.withLock { $0.byRedemption[redemptionId, default: 0] } }
}

/// One download's place in ``DownloadSlots``; released exactly once.
final class DownloadSlot: Sendable {
    private let slots: DownloadSlots
    private let address: String
    private let redemptionId: String
    private let released = Mutex(false)

    fileprivate init(slots: DownloadSlots, address: String, redemptionId: String) {
        self.slots = slots
        self.address = address
        self.redemptionId = redemptionId
    }

    func release() {
        let first = released.withLock { released -> Bool in
            defer { released = true }
            return !released
        }
        if first { slots.release(address, redemptionId) }
    }

    deinit { release() }
}

extension Problem {
    static func tooManyDownloads(_ limit: Int, of what: String = "from this address") -> Problem {
        Problem(
            .tooManyDownloads, "\(limit) downloads \(what) are in progress; retry when one has finished",
            headers: [.retryAfter: "2"])
    }
}

/// Closes a download's connection when its writes make no progress for `timeout`: a client
/// that requests a large asset and never reads would otherwise hold the connection, its
/// descriptor and the chunks in flight forever (the write to a full socket never returns).
///
/// One timer per download, re-armed from the last progress when it fires (progress is one
/// atomic store per write, not a timer per write). Closing the channel fails the pending
/// write, so the streaming task ends and frees its chunks.
final class StallWatchdog: Sendable {
    private struct State {
        var lastProgress: NIODeadline
        var scheduled: Scheduled<Void>?
        var stopped = false
    }

    private let state: Mutex<State>
    private let channel: any Channel
    private let timeout: TimeAmount
    private let onStall: @Sendable () -> Void

    /// Starts watching; call ``progress()`` after each accepted write and ``stop()`` at the end.
    init(channel: any Channel, timeout: TimeAmount, onStall: @escaping @Sendable () -> Void) {
        self.channel = channel
        self.timeout = timeout
        self.onStall = onStall
        let now = NIODeadline.now()
        self.state = Mutex(State(lastProgress: now))
        arm(at: now + timeout)
    }

    func progress() { state.withLock { $0.lastProgress = .now() } }

    func stop() {
        let scheduled = state.withLock { state -> Scheduled<Void>? in
            state.stopped = true
            defer { state.scheduled = nil }
            return state.scheduled
        }
        scheduled?.cancel()
    }

    private func arm(at deadline: NIODeadline) {
        let scheduled = channel.eventLoop.scheduleTask(deadline: deadline) { [self] in fire() }
        let stopped = state.withLock { state -> Bool in
            if !state.stopped { state.scheduled = scheduled }
            return state.stopped
        }
        if stopped { scheduled.cancel() }
    }

    private func fire() {
        enum Action {
            case nothing
            case rearm(NIODeadline)
            case close
        }
        let action = state.withLock { state -> Action in
            guard !state.stopped else { return .nothing }
            let due = state.lastProgress + timeout
            if due > .now() { return .rearm(due) }
            state.stopped = true
            state.scheduled = nil
            return .close
        }
        switch action {
        case .nothing: break
        case .rearm(let due): arm(at: due)
        case .close:
            onStall()
            channel.close(promise: nil)
        }
    }
}

/// Closes any connection whose outbound side stays unwritable (the peer reads nothing and
/// every buffer is full) for `timeout`. Downloads have their own, shorter watchdog (which
/// logs the client address); this catches the rest — a response head that cannot be
/// written, or a client pipelining thousands of small requests it never reads the answers
/// to — which Hummingbird's idle timeout does not, since a request is in progress.
final class WriteStallHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny

    private let timeout: TimeAmount
    private let logger: Logger
    private var scheduled: Scheduled<Void>?

    init(timeout: TimeAmount, logger: Logger) {
        self.timeout = timeout
        self.logger = logger
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            cancel()
        } else if scheduled == nil {
            let peer = context.channel.remoteAddress?.ipAddress.map(IPAddress.normalized) ?? "unknown"
            scheduled = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) { [self] in
                scheduled = nil
                logger.notice(
                    "connection closed: the peer read nothing", metadata: ["peer": "\(peer)", "seconds": "\(timeout.nanoseconds / 1_000_000_000)"])
                context.close(promise: nil)
            }
        }
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        cancel()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) { cancel() }

    private func cancel() {
        scheduled?.cancel()
        scheduled = nil
    }
}

@available(*, unavailable)
extension WriteStallHandler: Sendable {}

/// At most ``Gate/capacity`` `/v1/audit` requests reading the database at once on this
/// instance (``CofferConfiguration/auditConcurrency``); more get 503 `auditBusy` with
/// `Retry-After`. Audit reads scan and page the ledger; without a limit, one auditor key could
/// hold every database connection (or SQLite reader) that players' requests need, each up to
/// the statement timeout. Runs after the key check: only authenticated requests take a place.
///
/// A request holds its place while its handler runs. A streamed answer (an export: no
/// `Content-Length`) then holds it only while it reads: each chunk is written to the client
/// without it (a slow reader holds no place), and the next page waits its turn for one,
/// ahead of new requests (``AuditPlaceWriter``) — up to ``pageWait``, then the stream is cut
/// (the client sees a 200 closed early). At most ``streams`` exports stream at once. When the
/// body never runs, both are given back when the response is dropped (``AuditPlace`` leaves on
/// deinit).
struct AuditConcurrencyMiddleware: RouterMiddleware {
    typealias Context = CofferRequestContext
    let gate: Gate
    /// Streamed answers open at once (twice the places): beyond it an export is refused up
    /// front (503) rather than let in to wait for its pages, and cut when they come too late.
    let streams: Gate
    let metrics: CofferMetrics?
    /// How long a streamed answer's next page waits for a place before the stream is cut.
    var pageWait: Duration = .seconds(30)

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let place = AuditPlace(gate, metrics: metrics) else {
            throw busy(context, "\(gate.capacity) audit requests are reading the database on this server")
        }
        var response: Response
        do { response = try await next(request, context) } catch {
            place.leave()
            throw error
        }
        guard response.body.contentLength == nil else {
            place.leave()
            return response
        }
        guard let stream = AuditPlace(streams, metrics: nil) else {
            place.leave()
            throw busy(context, "\(streams.capacity) audit exports are streaming from this server")
        }
        let body = response.body
        let (pageWait, logger) = (self.pageWait, context.logger)
        response.body = ResponseBody { writer in
            defer {
                place.leave()
                stream.leave()
            }
            do { try await body.write(AuditPlaceWriter(base: writer, place: place, wait: pageWait)) } catch let busy as AuditPlace.Busy {
                logger.notice("audit export cut: no place came free in time", metadata: ["seconds": "\(busy.waited.components.seconds)"])
                throw busy
            }
        }
        return response
    }

    private func busy(_ context: Context, _ what: String) -> Problem {
        metrics?.auditBusy.increment()
        context.logger.notice("audit request refused", metadata: ["reason": "\(what)"])
        return Problem(.auditBusy, "\(what); retry in 1 s", headers: [.retryAfter: "1"])
    }
}

/// Writes a streamed audit answer without holding its place: the place is given back while a
/// chunk goes to the client and taken again, waiting its turn, before the body reads on.
struct AuditPlaceWriter: ResponseBodyWriter {
    var base: any ResponseBodyWriter
    let place: AuditPlace
    let wait: Duration

    mutating func write(_ buffer: ByteBuffer) async throws {
        place.pause()
        try await base.write(buffer)
        try await place.resume(within: wait)
    }

    consuming func finish(_ trailingHeaders: HTTPFields?) async throws {
        place.leave()
        try await base.finish(trailingHeaders)
    }
}

/// One request's place in the audit ``Gate``: held from the start, given back for a while
/// (``pause()``) and taken again (``resume(within:)``), given back for good once (``leave()``,
/// or deinit).
final class AuditPlace: Sendable {
    /// No place came free within the wait: the stream is cut.
    struct Busy: Error {
        var waited: Duration
    }

    private struct State {
        var held = true
        var done = false
    }

    private let gate: Gate
    private let metrics: CofferMetrics?
    private let state = Mutex(State())

    /// A place now, or nil when every place is taken (or others wait for one).
    init?(_ gate: Gate, metrics: CofferMetrics?) {
        guard gate.enter() else { return nil }
        self.gate = gate
        self.metrics = metrics
        metrics?.auditInFlight.increment()
    }

    /// Gives the place back until ``resume(within:)``.
    func pause() { release(done: false) }

    /// Takes a place again, behind those already waiting, within `wait`; throws ``Busy`` when
    /// none came free.
    func resume(within wait: Duration) async throws {
        guard await gate.enter(within: wait) else {
            try Task.checkCancellation()
            throw Busy(waited: wait)
        }
        let keep = state.withLock { state -> Bool in
            guard !state.done, !state.held else { return false }
            state.held = true
            return true
        }
        if keep { metrics?.auditInFlight.increment() } else { gate.leave() }
    }

    /// Gives the place back for good.
    func leave() { release(done: true) }

    private func release(done: Bool) {
        let held = state.withLock { state -> Bool in
            defer {
                state.held = false
                if done { state.done = true }
            }
            return state.held
        }
        guard held else { return }
        gate.leave()
        metrics?.auditInFlight.decrement()
    }

    deinit { leave() }
}

/// Ends a connection whose response went out before its request's body was read: a 401 to
/// an upload without a key, a 413, a 408 (which says `Connection: close`). Hummingbird
/// would otherwise read and discard the rest of that body, however long and however slowly
/// it comes, before the next request: a client could hold the connection with a body it
/// never finishes, and the 408's `Connection: close` would be a promise not kept.
///
/// The response gets `Connection: close`; once it is written, the server's side is shut
/// (the client sees the answer end) and what the client still sends is read and dropped
/// until it pauses for ``linger`` (or for ``longestLinger`` at most) — a lingering close, so
/// the answer is not lost to the reset an abrupt close with unread bytes causes — then the
/// connection is closed. Requests are counted, so each response is matched with its own
/// request.
final class EarlyResponseCloseHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    /// As nginx's `lingering_timeout` and `lingering_time`: closed after this long without
    /// anything from the client, and this long after the answer at most. A client that sends
    /// its whole body before it reads the answer (many do) still gets it.
    static let linger = TimeAmount.seconds(2)
    static let longestLinger = TimeAmount.seconds(30)

    private var requestsEnded = 0
    private var responses = 0
    private var closeAfterResponse = false
    private var lingering: Scheduled<Void>?
    private var lingerEnds: NIODeadline?

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        if case .end = part { requestsEnded += 1 }
        if let lingering, let lingerEnds {
            lingering.cancel()
            self.lingering = nil
            if case .end = part {
                // The body the client was still sending has ended: no need to wait longer.
                context.close(promise: nil)
                return
            }
            // Still sending: wait for the next bytes, within the longest linger.
            linger(context, until: min(.now() + Self.linger, lingerEnds))
        }
        context.fireChannelRead(data)
    }

    private func linger(_ context: ChannelHandlerContext, until deadline: NIODeadline) {
        lingering = context.eventLoop.assumeIsolated().scheduleTask(deadline: deadline) {
            context.close(promise: nil)
        }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head(var head) where head.status.kind != .informational:
            responses += 1
            if requestsEnded < responses || head.headerFields[.connection]?.lowercased() == "close" {
                closeAfterResponse = true
                head.headerFields[.connection] = "close"
                context.write(wrapOutboundOut(.head(head)), promise: promise)
            } else {
                context.write(data, promise: promise)
            }
        case .end where closeAfterResponse:
            closeAfterResponse = false
            let written = promise ?? context.eventLoop.makePromise()
            context.writeAndFlush(data, promise: written)
            written.futureResult.assumeIsolated().whenComplete { [self] _ in
                guard context.channel.isActive else { return }
                let shut = context.eventLoop.makePromise(of: Void.self)
                context.close(mode: .output, promise: shut)
                shut.futureResult.assumeIsolated().whenFailure { _ in context.close(promise: nil) }
                let ends = NIODeadline.now() + Self.longestLinger
                lingerEnds = ends
                linger(context, until: min(.now() + Self.linger, ends))
            }
        default:
            context.write(data, promise: promise)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        lingering?.cancel()
        lingering = nil
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        lingering?.cancel()
        lingering = nil
    }
}

@available(*, unavailable)
extension EarlyResponseCloseHandler: Sendable {}
