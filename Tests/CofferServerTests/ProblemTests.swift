import CofferCore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import CofferServer

/// One path to 503 (every one with `Retry-After`, storage details never sent), and request
/// bodies that answer 413 only when they are too large.
@Suite("Problem")
struct ProblemTests {
    @Test func every503CarriesRetryAfterAndStorageDetailsStayInside() {
        for code in ProblemCode.allCases where code.status == 503 {
            #expect(Problem(code, "x").headers[.retryAfter] != nil, "\(code.rawValue)")
        }
        #expect(Problem.busy(7).headers[.retryAfter] == "7")
        let storage = Problem(VaultFailure(.storageUnavailable, "SQLite error 10: disk I/O error"))
        #expect(storage.status == .serviceUnavailable)
        #expect(!storage.detail.contains("SQLite"))
        #expect(storage.internalDetail?.contains("disk I/O") == true)
        #expect(Problem(.malformedRequest, "x").headers[.retryAfter] == nil)
    }

    @Test func statusesComeFromTheTable() {
        #expect(Problem(.alreadyRedeemed, "x").status == .conflict)
        #expect(Problem(.revoked, "x").status == .gone)
        #expect(Problem(VaultFailure.incomplete("x")).status == .unprocessableContent)
        #expect(Problem(VaultFailure.verification(VerificationError(.malformed, "x"))).status == .badRequest)
    }

    @Test func aCancelledRequestIsA503ToRetryNotA500() async throws {
        let router = Router()
        router.add(middleware: ProblemMiddleware())
        router.put("/cancelled") { _, _ -> Response in throw CancellationError() }
        router.put("/broken") { _, _ -> Response in throw Broken() }
        try await Application(router: router).test(.router) { client in
            let cancelled = try await client.execute(uri: "/cancelled", method: .put)
            #expect(cancelled.status == .serviceUnavailable)
            #expect(cancelled.headers[.retryAfter] == "1")
            #expect(String(buffer: cancelled.body).contains("\"busy\""))
            // Any other error is still the logged 500.
            #expect(try await client.execute(uri: "/broken", method: .put).status == .internalServerError)
        }
    }

    struct Broken: Error {}

    static func request(_ chunks: [String], fail: Bool = false, contentLength: Int? = nil) -> Request {
        let stream = AsyncThrowingStream<ByteBuffer, any Error> { continuation in
            for chunk in chunks { continuation.yield(ByteBuffer(string: chunk)) }
            continuation.finish(throwing: fail ? Broken() : nil)
        }
        var head = HTTPRequest(method: .post, scheme: "http", authority: "localhost", path: "/v1/redemptions")
        if let contentLength { head.headerFields[.contentLength] = String(contentLength) }
        return Request(head: head, body: RequestBody(asyncSequence: stream))
    }

    static func code(_ body: () async throws -> ByteBuffer) async -> ProblemCode? {
        do {
            _ = try await body()
            return nil
        } catch let problem as Problem {
            return problem.code
        } catch {
            return .internalError
        }
    }

    @Test func collectAnswers413OnlyForABodyThatIsTooLarge() async {
        let reservation = BodyReservation(nil, client: "1.2.3.4")
        defer { reservation.release() }
        func collect(_ request: Request) async -> ProblemCode? {
            await Self.code { try await JSON.collect(request, limit: 8, timeout: .seconds(5), reservation: reservation) }
        }
        #expect(await collect(Self.request(["12345678"])) == nil)
        #expect(await collect(Self.request(["12345", "6789"])) == .payloadTooLarge)
        #expect(await collect(Self.request(["1"], contentLength: 9)) == .payloadTooLarge)
        // A body that fails while it is read is not "too large".
        #expect(await collect(Self.request(["123"], fail: true)) == .malformedRequest)
    }
}
