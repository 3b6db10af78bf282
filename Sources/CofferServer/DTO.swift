import CofferCore
import Foundation
import Hummingbird

/// JSON in and out. Dates are ISO 8601 UTC strings.
enum JSON {
    static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        e.dateEncodingStrategy = .custom { date, encoder in
            var c = encoder.singleValueContainer()
            try c.encode(RFC3339.format(date))
        }
        return e
    }()

    static func response<T: Encodable>(_ value: T, status: HTTPResponse.Status = .ok) throws -> Response {
        let data = try encoder.encode(value)
        return Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// Collects a JSON body (up to `limit` bytes) and decodes it: 413 only for a body over
    /// `limit`, 400 for one that cannot be read or decoded.
    /// The body must arrive within `timeout` (slow clients cannot pin a connection): 408.
    /// Its bytes are held against the server's request-body budget (`context.bodyBudget`)
    /// until decoding is done: 503 `busy` when the budget is spent.
    static func decode<T: Decodable>(
        _ type: T.Type, from request: Request, context: CofferRequestContext, limit: Int, timeout: Duration
    ) async throws -> T {
        let reservation = BodyReservation(context.bodyBudget, client: context.limitKey)
        defer { reservation.release() }
        let buffer: ByteBuffer
        do { buffer = try await collect(request, limit: limit, timeout: timeout, reservation: reservation) } catch let problem as Problem
            where problem.code == .busy || problem.code == .rateLimited
        {
            context.logger.notice(
                problem.code == .busy ? "request body budget spent: 503 busy" : "a client's request bodies hold its share of the budget: 429",
                metadata: [
                    "client": "\(context.clientAddress)", "budget": "\(context.bodyBudget?.capacity ?? 0)",
                    "share": "\(context.bodyBudget?.perClient ?? 0)",
                ])
            throw problem
        }
        // UTF-8 only: JSONDecoder also reads UTF-16 and UTF-32 (with or without a byte-order
        // mark), whose zero bytes and two-byte escapes the count below would misread — a body
        // it counts as 2 could decode to millions of values. Valid UTF-8 JSON holds no 0x00
        // byte; UTF-16 and UTF-32 JSON always does (its first character is ASCII).
        guard !buffer.withUnsafeReadableBytes({ Self.notUTF8($0) }) else {
            throw Problem(.malformedRequest, "request body is not the expected JSON: it must be UTF-8")
        }
        guard buffer.withUnsafeReadableBytes({ Self.structure($0, atMost: maxStructure) }) <= maxStructure else {
            throw Problem(.malformedRequest, "request body is not the expected JSON: more than \(maxStructure) members and elements")
        }
        do { return try JSONDecoder().decode(T.self, from: Data(buffer.readableBytesView)) } catch {
            throw Problem(.malformedRequest, "request body is not the expected JSON: \(Self.describe(error))")
        }
    }

    /// How many objects, arrays, members and elements a body may hold (counted by
    /// ``structure(_:atMost:)``): the largest expected body (a product's up to 1,000 asset ids)
    /// needs about 1,010. The body budget counts bytes, but JSONDecoder's parse holds far more
    /// than the bytes of a body made of small values, even in members nobody reads: an 8 MiB
    /// `{"x":[0,0,…]}` raised the peak RSS by 198 MB and 708,000 unknown members by 76 MB, in
    /// 0.23–0.25 s of CPU, against 10 MB and 0.024 s for an 8 MiB receipt string (measured
    /// 2026-11-29 on this toolchain, `swiftc -O`).
    static let maxStructure = 4096

    /// Whether `bytes` holds a 0x00 byte or starts with a UTF-16 byte-order mark (what UTF-16
    /// and UTF-32 text always does, and UTF-8 JSON never).
    static func notUTF8(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard let base = bytes.baseAddress else { return false }
        if bytes.count >= 2, (bytes[0] == 0xFE && bytes[1] == 0xFF) || (bytes[0] == 0xFF && bytes[1] == 0xFE) { return true }
        return memchr(base, 0, bytes.count) != nil
    }

    /// The `{`, `[`, `:` and `,` outside strings in `bytes` (each object or array, and each
    /// member or element after the first, adds one), counted up to `atMost` + 1. Strings are
    /// skipped with `memchr` to each quote (one ends at a quote after an even run of
    /// backslashes): an 8 MiB receipt takes 0.09 ms, a byte-by-byte loop took 8.4 ms (a third
    /// of its decoding) and 5 µs for a 6 KB one (measured 2026-11-29).
    static func structure(_ bytes: UnsafeRawBufferPointer, atMost limit: Int) -> Int {
        guard let base = bytes.baseAddress else { return 0 }
        let n = bytes.count
        var count = 0
        var i = 0
        while i < n {
            switch bytes[i] {
            case UInt8(ascii: "\""):
                var from = i + 1
                while true {
                    // Unterminated: the decoder refuses it.
                    guard from < n, let found = memchr(base + from, Int32(UInt8(ascii: "\"")), n - from) else { return count }
                    let quote = base.distance(to: UnsafeRawPointer(found))
                    var backslashes = 0
                    while quote - 1 - backslashes > i, bytes[quote - 1 - backslashes] == UInt8(ascii: "\\") { backslashes += 1 }
                    from = quote + 1
                    if backslashes % 2 == 0 { break }
                }
                i = from
                continue
            case UInt8(ascii: "{"), UInt8(ascii: "["), UInt8(ascii: ":"), UInt8(ascii: ","):
                count += 1
                if count > limit { return count }
            default: break
            }
            i += 1
        }
        return count
    }

    private struct TooLarge: Error {}

    /// Collects at most `limit` bytes of body within `timeout`, reserving each chunk from
    /// `reservation` as it arrives. The caller releases the reservation.
    ///
    /// Only bytes that arrived are held: reserved (and allocated) from the declared
    /// `Content-Length` before any byte came, a few idle connections each declaring the
    /// largest body held the whole budget — every JSON route 503 `busy` for everyone — for the
    /// body timeout, at no cost to the client.
    static func collect(_ request: Request, limit: Int, timeout: Duration, reservation: BodyReservation) async throws -> ByteBuffer {
        let declared = request.headers[.contentLength].flatMap(Int.init)
        if let declared, declared > limit {
            throw Problem(.payloadTooLarge, "request body exceeds \(limit) bytes")
        }
        // The read runs as its own task, which the shared ticker cancels at the deadline
        // (``BodyDeadlines``): one task per body, no timer of its own.
        let reader = Task<ByteBuffer, any Error> {
            var buffer = ByteBufferAllocator().buffer(capacity: min(declared ?? 0, 64 * 1024))
            for try await chunk in request.body {
                guard chunk.readableBytes <= limit - buffer.readableBytes else { throw TooLarge() }
                if let refusal = reservation.reserve(chunk.readableBytes) { throw refusal }
                var chunk = chunk
                buffer.writeBuffer(&chunk)
            }
            return buffer
        }
        let deadline = BodyDeadlines.shared.add(.now + timeout) { reader.cancel() }
        let result = await withTaskCancellationHandler {
            await reader.result
        } onCancel: {
            reader.cancel()
        }
        let expired = !BodyDeadlines.shared.remove(deadline)
        // A read cancelled by its deadline is the timeout; one that failed on its own (too
        // large, over budget, the connection lost) keeps its error even when the deadline
        // passed just after.
        let outcome: Result<ByteBuffer, any Error>? =
            if expired, case .failure(let error) = result, error is CancellationError { nil } else { result }
        switch outcome {
        case .success(let buffer)?: return buffer
        case .failure(ByteBudget.Refusal.spent)?: throw Problem.busy()
        case .failure(ByteBudget.Refusal.clientShare)?: throw Problem.bodiesInProgress()
        case .failure(let error)? where error is TooLarge: throw Problem(.payloadTooLarge, "request body exceeds \(limit) bytes")
        case .failure?: throw Problem(.malformedRequest, "the request body could not be read")
        case nil:
            throw Problem(
                .requestTimeout, "the request body did not arrive within \(timeout.components.seconds) s",
                headers: [.connection: "close"])
        }
    }

    static func describe(_ error: any Error) -> String {
        switch error {
        case DecodingError.keyNotFound(let key, _): "missing field \(key.stringValue)"
        case DecodingError.typeMismatch(_, let c), DecodingError.valueNotFound(_, let c):
            "wrong type at \(c.codingPath.map(\.stringValue).joined(separator: "."))"
        case DecodingError.dataCorrupted: "not valid JSON"
        default: "not valid JSON"
        }
    }
}

struct AssetLink: Encodable {
    var assetId: String
    var name: String
    var size: Int64
    var sha256: String
    var contentType: String
    var url: String
    var expiresAt: Date

    init(_ issued: IssuedAsset) {
        assetId = issued.asset.assetId
        name = issued.asset.name
        size = issued.asset.size
        sha256 = issued.asset.sha256
        contentType = issued.asset.contentType
        url = "/v1/downloads/" + issued.token
        expiresAt = issued.expiresAt
    }
}

/// The JSON of a redemption's answer, written directly: the bytes ``JSON/encoder`` writes (keys
/// sorted, `/` not escaped, dates RFC 3339; `DTOWriterTests` compares the two on generated
/// values), at a fraction of the cost — Foundation's encoder was 6% of a redemption's CPU.
struct JSONWriter {
    private(set) var bytes: [UInt8] = []
    private var first = true

    init(capacity: Int = 1024) { bytes.reserveCapacity(capacity) }

    mutating func open() {
        comma()
        bytes.append(UInt8(ascii: "{"))
        first = true
    }

    mutating func close() {
        bytes.append(UInt8(ascii: "}"))
        first = false
    }

    mutating func openArray(_ key: String) {
        self.key(key)
        bytes.append(UInt8(ascii: "["))
        first = true
    }

    mutating func closeArray() {
        bytes.append(UInt8(ascii: "]"))
        first = false
    }

    mutating func field(_ key: String, _ value: String?) {
        guard let value else { return }
        self.key(key)
        string(value)
    }

    mutating func field(_ key: String, _ value: Int64) {
        self.key(key)
        bytes.append(contentsOf: String(value).utf8)
    }

    mutating func field(_ key: String, _ value: Bool?) {
        guard let value else { return }
        self.key(key)
        bytes.append(contentsOf: (value ? "true" : "false").utf8)
    }

    mutating func field(_ key: String, _ value: Date?) { field(key, value.map(RFC3339.format)) }

    private mutating func comma() {
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
    }

    private mutating func key(_ key: String) {
        comma()
        string(key)
        bytes.append(UInt8(ascii: ":"))
    }

    private static let hex = Array("0123456789abcdef".utf8)

    private mutating func string(_ value: String) {
        bytes.append(UInt8(ascii: "\""))
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case 0x0A: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0x08: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "b")])
            case 0x0C: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "f")])
            case 0x00..<0x20:
                bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")])
                bytes.append(Self.hex[Int(byte >> 4)])
                bytes.append(Self.hex[Int(byte & 0x0F)])
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }
}

struct RedemptionResponse: Encodable {
    var redemptionId: String
    var transactionId: String
    var originalTransactionId: String?
    var productId: String
    var environment: String
    var grant: String?
    var assets: [AssetLink]
    /// The owner presented a purchase already theirs (200, fresh tokens, no new grant).
    var restored: Bool?
    /// A subscription's entitlement end.
    var entitlementEndsAt: Date?

    init(_ outcome: RedemptionOutcome) {
        redemptionId = outcome.redemption.redemptionId
        transactionId = outcome.redemption.transactionId
        originalTransactionId = outcome.redemption.originalTransactionId
        productId = outcome.redemption.productId
        environment = outcome.redemption.environment
        grant = outcome.grant
        assets = outcome.assets.map(AssetLink.init)
        restored = outcome.restored ? true : nil
        entitlementEndsAt = outcome.entitlementEndsAt
    }

    /// What `JSON.encoder.encode(self)` gives, keys in the same (sorted) order.
    var json: [UInt8] {
        var w = JSONWriter()
        w.open()
        w.openArray("assets")
        for asset in assets {
            w.open()
            w.field("assetId", asset.assetId)
            w.field("contentType", asset.contentType)
            w.field("expiresAt", asset.expiresAt)
            w.field("name", asset.name)
            w.field("sha256", asset.sha256)
            w.field("size", asset.size)
            w.field("url", asset.url)
            w.close()
        }
        w.closeArray()
        w.field("entitlementEndsAt", entitlementEndsAt)
        w.field("environment", environment)
        w.field("grant", grant)
        w.field("originalTransactionId", originalTransactionId)
        w.field("productId", productId)
        w.field("redemptionId", redemptionId)
        w.field("restored", restored)
        w.field("transactionId", transactionId)
        w.close()
        return w.bytes
    }

    func response(status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: json)))
    }
}

/// `GET /v1/entitlements`: what a player owns.
struct EntitlementResponse: Encodable {
    var redemptionId: String
    var transactionId: String
    var originalTransactionId: String?
    var productId: String
    var environment: String
    var state: String
    var endsAt: Date?
    var inGracePeriod: Bool
    var assets: [AssetLink]

    init(_ owned: OwnedEntitlement) {
        let r = owned.entitlement.redemption
        redemptionId = r.redemptionId
        transactionId = r.transactionId
        originalTransactionId = r.originalTransactionId
        productId = r.productId
        environment = r.environment
        state = owned.entitlement.state.rawValue
        endsAt = owned.entitlement.endsAt
        inGracePeriod = owned.entitlement.inGracePeriod
        assets = owned.assets.map(AssetLink.init)
    }
}

struct Page<Item: Encodable>: Encodable {
    var items: [Item]
    var nextCursor: String?
}
