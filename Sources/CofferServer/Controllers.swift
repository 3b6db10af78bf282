import CofferCore
import CofferStore
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// Game clients: redeem a purchase, exchange a grant for fresh tokens.
struct RedemptionController {
    let services: CofferServices

    struct RedeemBody: Decodable {
        var receipt: String?
        var signedTransaction: String?
        var transactionId: String?
        var appAccountToken: String?
    }

    struct GrantBody: Decodable {
        var grant: String
    }

    struct NotificationBody: Decodable {
        var signedPayload: String
    }

    func add(to router: RouterGroup<CofferRequestContext>) {
        router.post("/v1/redemptions") { request, context in try await redeem(request, context: context) }
        router.post("/v1/grants/tokens") { request, context in
            let body = try await JSON.decode(
                GrantBody.self, from: request, context: context, limit: 4096, timeout: services.configuration.bodyTimeout)
            let outcome = try await services.vault.exchange(grant: body.grant, now: Date())
            return try JSON.response(RedemptionResponse(outcome))
        }
    }

    /// App Store Server Notifications V2: Apple posts `{"signedPayload": JWS}`. The signature is
    /// the authentication; REFUND and REVOKE of a redeemed transaction revoke it.
    func notification(_ request: Request, context: CofferRequestContext) async throws -> Response {
        let body = try await JSON.decode(
            NotificationBody.self, from: request, context: context, limit: 256 * 1024, timeout: services.configuration.bodyTimeout)
        let outcome: Vault.NotificationOutcome
        do { outcome = try await services.vault.handleNotification(body.signedPayload, now: Date()) } catch { throw Problem(error) }
        if outcome != .ignored {
            context.logger.notice("notification", metadata: ["result": "\(outcome.rawValue)"])
        }
        return try JSON.response(["result": outcome.rawValue])
    }

    func redeem(_ request: Request, context: CofferRequestContext) async throws -> Response {
        let body = try await JSON.decode(
            RedeemBody.self, from: request, context: context, limit: services.configuration.jsonBodyLimit,
            timeout: services.configuration.bodyTimeout)
        let proof: RedemptionRequest.Proof
        switch (body.receipt, body.signedTransaction) {
        case (let receipt?, nil):
            guard let der = Base64.decode(receipt), !der.isEmpty else {
                throw Problem(.badRequest, "malformedRequest", "receipt is not base64")
            }
            proof = .receipt(der)
        case (nil, let jws?):
            proof = .signedTransaction(jws)
        default:
            throw Problem(.badRequest, "malformedRequest", "send exactly one of receipt (base64) or signedTransaction (JWS)")
        }
        if let token = body.appAccountToken, token.utf8.count > 64 {
            throw Problem(.badRequest, "malformedRequest", "appAccountToken is longer than 64 characters")
        }
        if let id = body.transactionId, id.isEmpty || id.utf8.count > 64 {
            throw Problem(.badRequest, "malformedRequest", "transactionId must be 1–64 characters")
        }
        let start = ContinuousClock.now
        let outcome: RedemptionOutcome
        do {
            outcome = try await services.vault.redeem(
                RedemptionRequest(
                    proof: proof, transactionId: body.transactionId, appAccountToken: body.appAccountToken, clientAddress: context.clientAddress),
                now: Date())
        } catch {
            services.metrics.redemption(result: error.code)
            throw Problem(error)
        }
        services.metrics.redemption(result: "redeemed")
        services.metrics.verificationSeconds.record(ContinuousClock.now - start)
        return try JSON.response(RedemptionResponse(outcome), status: .created)
    }
}

/// Token-authorised downloads, streamed from the content store, with single Range support.
/// A streamed body holds one of its address's download slots and is closed when the client
/// stops reading for the stall timeout.
struct DownloadController {
    let services: CofferServices
    let slots: DownloadSlots

    func add(to router: Router<CofferRequestContext>) {
        router.get("/v1/downloads/:token") { request, context in try await download(request, context: context, head: false) }
        router.head("/v1/downloads/:token") { request, context in try await download(request, context: context, head: true) }
    }

    func download(_ request: Request, context: CofferRequestContext, head: Bool) async throws -> Response {
        let token = context.parameters.get("token") ?? ""
        let claims: DownloadClaims
        do { claims = try services.vault.tokens.verify(token, now: Date()) } catch {
            switch error {
            case .expired: throw Problem(.forbidden, "tokenExpired", "the download token has expired: redeem again or exchange the grant")
            case .invalid: throw Problem(.forbidden, "tokenInvalid", "the download token is not valid")
            }
        }
        guard let path = services.content.path(sha256: claims.sha256),
            let attributes = try? FileManager.default.attributesOfItem(atPath: path),
            let size = (attributes[.size] as? NSNumber)?.int64Value
        else { throw Problem(.notFound, "assetMissing", "the asset's bytes are not in the content store") }
        let asset = try? await services.catalogue.asset(claims.assetId)
        let contentType = asset?.sha256 == claims.sha256 ? asset?.contentType ?? "application/octet-stream" : "application/octet-stream"

        var headers: HTTPFields = [
            .contentType: contentType,
            .eTag: "\"\(claims.sha256)\"",
            .acceptRanges: "bytes",
            .cacheControl: "private, no-store",
        ]
        if let prefix = services.configuration.accelRedirectPrefix, let relative = services.content.relativePath(sha256: claims.sha256) {
            // nginx serves the bytes (and any Range) from its internal location.
            headers[.xAccelRedirect] = prefix + relative
            services.metrics.downloads.increment()
            return Response(status: .ok, headers: headers, body: .init())
        }
        var status = HTTPResponse.Status.ok
        var range: ClosedRange<Int64>? = size > 0 ? 0...(size - 1) : nil
        if let header = request.headers[.range] {
            switch ByteRange.parse(header, size: size) {
            case .ignore: break
            case .unsatisfiable:
                throw Problem(
                    .rangeNotSatisfiable, "rangeNotSatisfiable", "range \(header.prefix(64)) is outside 0–\(size)",
                    headers: [.contentRange: "bytes */\(size)"])
            case .range(let r):
                range = r
                status = .partialContent
                headers[.contentRange] = "bytes \(r.lowerBound)-\(r.upperBound)/\(size)"
            }
        }
        let length = range.map { $0.upperBound - $0.lowerBound + 1 } ?? 0
        headers[.contentLength] = String(length)
        if head || length == 0 {
            services.metrics.downloads.increment()
            return Response(status: status, headers: headers, body: .init())
        }
        guard let slot = slots.acquire(context.clientAddress) else {
            services.metrics.rateLimited(route: "downloads")
            context.logger.notice("too many downloads", metadata: ["client": "\(context.clientAddress)", "limit": "\(slots.perAddress)"])
            throw Problem.tooManyDownloads(slots.perAddress)
        }
        services.metrics.downloads.increment()
        services.metrics.downloadBytes.increment(by: length)
        let client = context.clientAddress
        let logger = context.logger
        let metrics = services.metrics
        let timeout = services.configuration.downloadStallTimeoutSeconds
        let watch = FileStream.Watch(
            channel: context.channel, stallTimeout: .seconds(timeout),
            onStall: {
                metrics.downloadStalls.increment()
                logger.notice("download stalled: no progress, connection closed", metadata: ["client": "\(client)", "seconds": "\(timeout)"])
            }, slot: slot)
        let body = FileStream.body(path: path, range: range ?? 0...0, watch: watch)
        return Response(status: status, headers: headers, body: body)
    }
}

extension HTTPField.Name {
    static let xAccelRedirect = HTTPField.Name("X-Accel-Redirect")!
}

/// A single `bytes=` range (RFC 9110 §14.1.2). Several ranges are answered with the whole file.
enum ByteRange: Equatable {
    case ignore
    case unsatisfiable
    case range(ClosedRange<Int64>)

    static func parse(_ header: String, size: Int64) -> ByteRange {
        guard header.hasPrefix("bytes="), header.utf8.count <= 200 else { return .ignore }
        let spec = header.dropFirst(6).trimmingCharacters(in: .whitespaces)
        guard !spec.contains(",") else { return .ignore }
        let parts = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return .ignore }
        let first = parts[0].trimmingCharacters(in: .whitespaces)
        let last = parts[1].trimmingCharacters(in: .whitespaces)
        if first.isEmpty {
            guard let suffix = Int64(last), suffix >= 0 else { return .ignore }
            guard suffix > 0, size > 0 else { return .unsatisfiable }
            return .range(max(0, size - suffix)...(size - 1))
        }
        guard let start = Int64(first), start >= 0 else { return .ignore }
        guard start < size else { return .unsatisfiable }
        if last.isEmpty { return .range(start...(size - 1)) }
        guard let end = Int64(last), end >= start else { return .ignore }
        return .range(start...min(end, size - 1))
    }
}
