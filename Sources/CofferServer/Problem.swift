import CofferCore
import Foundation
import Hummingbird

/// An RFC 9457 problem: every error Coffer returns, with a stable machine-readable
/// ``ProblemCode`` whose status comes from one table (``ProblemCode/status``).
public struct Problem: HTTPResponseError, Sendable {
    public var code: ProblemCode
    public var status: HTTPResponse.Status
    public var detail: String
    public var headers: HTTPFields
    /// What went wrong inside the server (a storage error, a broken ledger seal): logged by
    /// ``ProblemMiddleware``, never sent to the client.
    public var internalDetail: String?

    /// A problem with `code`'s status. Every 503 (the server's state, not the request) carries
    /// `Retry-After` (1 s unless `headers` say otherwise): this is the one path to a 503.
    /// `status` overrides the table only where the API has always differed (see
    /// ``ProblemCode``'s tests): a framework error's own status, `unknownAsset` named by a product.
    public init(_ code: ProblemCode, _ detail: String, headers: HTTPFields = [:], status: HTTPResponse.Status? = nil) {
        self.code = code
        self.status = status ?? HTTPResponse.Status(code: code.status)
        self.detail = detail
        self.headers = headers
        if self.status == .serviceUnavailable && self.headers[.retryAfter] == nil { self.headers[.retryAfter] = "1" }
    }

    /// 503: storage (or the ledger behind it) failed. The client learns that it failed, not
    /// how: `internalDetail` (database messages, the seal's state) goes to the log.
    public static func unavailable(_ code: ProblemCode = .storageUnavailable, internalDetail: String) -> Problem {
        var problem = Problem(code, "storage is not available; retry later")
        problem.internalDetail = internalDetail
        return problem
    }

    /// The content store failed: 503 `contentStoreUnavailable` (unreachable, timed out, a
    /// local I/O error) or 502 `contentStoreError` (the store refused: credentials,
    /// permissions, a missing bucket). Details go to the log only.
    public init(contentStore error: ContentStoreError) {
        switch error {
        case .tooLarge: self.init(.payloadTooLarge, "the upload exceeds its limit")
        case .digestMismatch: self.init(.digestMismatch, "the body does not match Content-Digest")
        case .io(let detail), .unavailable(let detail):
            self.init(.contentStoreUnavailable, "the content store is not available; retry later")
            internalDetail = detail
        case .failed(let detail), .changed(let detail):
            self.init(.contentStoreError, "the content store failed; the server's operator has been told")
            internalDetail = detail
        }
    }

    public init(_ failure: VaultFailure) {
        guard !failure.isUnavailable else {
            self = .unavailable(failure.code, internalDetail: failure.detail)
            return
        }
        self.init(failure.code, failure.detail, status: HTTPResponse.Status(code: failure.status))
    }

    /// The RFC 9457 body (keys in alphabetical order, like every Coffer JSON).
    struct Body: Encodable {
        var code: String
        var detail: String
        /// The request path with tokens redacted; absent for a non-canonical path, which is never echoed.
        var instance: String?
        var status: Int
        var title: String
        var type: String
    }

    /// The problem type's short summary (RFC 9457 `title`: the same for every occurrence of a
    /// code): the code in words, `alreadyRedeemed` → "Already redeemed", `playerTokenInvalid`
    /// → "Player token invalid", `nonCanonicalPath` → "Non canonical path".
    static func title(_ code: ProblemCode) -> String {
        var words = ""
        for character in code.rawValue {
            if character.isUppercase, !words.isEmpty {
                words += " " + character.lowercased()
            } else {
                words.append(character)
            }
        }
        return words.prefix(1).uppercased() + words.dropFirst()
    }

    /// `instance` for a request path: redacted (``PathPolicy/redacted(_:)``), and nil — omitted —
    /// when the path is not canonical.
    static func instance(_ path: String) -> String? {
        PathPolicy.isCanonical(path) ? PathPolicy.redacted(path) : nil
    }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        let body = Body(
            code: code.rawValue, detail: detail, instance: Self.instance(request.uri.path), status: status.code,
            title: Self.title(code), type: "https://coffer.invalid/problems/\(code.rawValue)")
        let data = (try? JSON.encoder.encode(body)) ?? Data()
        var headers = self.headers
        headers[.contentType] = "application/problem+json"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}

/// Turns every error into a problem response; unexpected ones are logged (never a silent 500).
struct ProblemMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let problem as Problem {
            return try respond(problem, request, context)
        } catch let failure as VaultFailure {
            return try respond(Problem(failure), request, context)
        } catch let error as HTTPError {
            let code: ProblemCode =
                switch error.status {
                case .contentTooLarge: .payloadTooLarge
                case .notFound: .notFound
                case .methodNotAllowed: .methodNotAllowed
                default: .httpError
                }
            return try Problem(code, error.body ?? error.status.reasonPhrase, status: error.status).response(from: request, context: context)
        } catch let error as ContentStoreError {
            return try respond(Problem(contentStore: error), request, context)
        } catch let error as any StorageFailure {
            return try respond(Problem.unavailable(internalDetail: "\(error)"), request, context)
        } catch is CancellationError {
            // The request's task was cancelled (the server stopping): nothing went wrong with it.
            context.logger.notice("request cancelled")
            return try Problem(.busy, "the request was cancelled (the server is stopping); retry", headers: [.retryAfter: "1"])
                .response(from: request, context: context)
        } catch {
            context.logger.error("unhandled error", metadata: ["error": "\(error)"])
            return try Problem(.internalError, "unexpected server error").response(from: request, context: context)
        }
    }

    /// The response for `problem`; what only the server may know is logged here.
    private func respond(_ problem: Problem, _ request: Request, _ context: Context) throws -> Response {
        if let internalDetail = problem.internalDetail { context.logger.error("storage failure", metadata: ["error": "\(internalDetail)"]) }
        return try problem.response(from: request, context: context)
    }
}
