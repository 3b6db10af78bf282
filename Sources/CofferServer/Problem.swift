import CofferCore
import Foundation
import Hummingbird

/// An RFC 9457 problem: every error Coffer returns, with a stable machine-readable `code`.
public struct Problem: HTTPResponseError, Sendable {
    public var status: HTTPResponse.Status
    public var code: String
    public var detail: String
    public var headers: HTTPFields
    /// What went wrong inside the server (a storage error, a broken ledger seal): logged by
    /// ``ProblemMiddleware``, never sent to the client.
    public var internalDetail: String?

    public init(_ status: HTTPResponse.Status, _ code: String, _ detail: String, headers: HTTPFields = [:]) {
        self.status = status
        self.code = code
        self.detail = detail
        self.headers = headers
    }

    public init(_ failure: VaultFailure) {
        let status: HTTPResponse.Status =
            switch failure.kind {
            case .badRequest: .badRequest
            case .unprocessable: .unprocessableContent
            case .notFound: .notFound
            case .conflict: .conflict
            case .gone: .gone
            case .forbidden: .forbidden
            case .unavailable: .serviceUnavailable
            }
        guard failure.kind == .unavailable else {
            self.init(status, failure.code, failure.detail)
            return
        }
        // The client learns that storage failed, not how: the details (database messages, the
        // ledger seal's state) go to the log.
        self.init(status, failure.code, "storage is not available; retry later", headers: [.retryAfter: "1"])
        internalDetail = failure.detail
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

    /// `instance` for a request path: redacted (``PathPolicy/redacted(_:)``), and nil — omitted —
    /// when the path is not canonical.
    static func instance(_ path: String) -> String? {
        PathPolicy.isCanonical(path) ? PathPolicy.redacted(path) : nil
    }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        let body = Body(
            code: code, detail: detail, instance: Self.instance(request.uri.path), status: status.code,
            title: status.reasonPhrase, type: "https://coffer.invalid/problems/\(code)")
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
            if let internalDetail = problem.internalDetail { context.logger.error("storage failure", metadata: ["error": "\(internalDetail)"]) }
            return try problem.response(from: request, context: context)
        } catch let failure as VaultFailure {
            let problem = Problem(failure)
            if let internalDetail = problem.internalDetail { context.logger.error("storage failure", metadata: ["error": "\(internalDetail)"]) }
            return try problem.response(from: request, context: context)
        } catch let error as HTTPError {
            let code: String =
                switch error.status {
                case .contentTooLarge: "payloadTooLarge"
                case .notFound: "notFound"
                case .methodNotAllowed: "methodNotAllowed"
                default: "httpError"
                }
            return try Problem(error.status, code, error.body ?? error.status.reasonPhrase).response(from: request, context: context)
        } catch let error as any StorageFailure {
            context.logger.error("storage failure", metadata: ["error": "\(error)"])
            return try Problem(.serviceUnavailable, "storageUnavailable", "storage is not available; retry later", headers: [.retryAfter: "1"])
                .response(from: request, context: context)
        } catch {
            context.logger.error("unhandled error", metadata: ["error": "\(error)"])
            return try Problem(.internalServerError, "internalError", "unexpected server error").response(from: request, context: context)
        }
    }
}
