import CofferCore
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// Game clients: redeem a purchase, exchange a grant for fresh tokens.
struct RedemptionController {
    let vault: Vault
    /// Player identity (nil: redemptions need no player token, restore is by grant).
    let players: PlayerTokens?
    let metrics: CofferMetrics
    /// Largest JSON request body (a base64 receipt of 4 MiB is ~5.4 MiB).
    let jsonBodyLimit: Int
    let bodyTimeout: Duration

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

    /// `POST /v1/notifications`, on its own rate limit.
    func addNotifications(to router: RouterGroup<CofferRequestContext>) {
        router.post("/v1/notifications") { request, context in try await notification(request, context: context) }
    }

    func add(to router: RouterGroup<CofferRequestContext>) {
        router.post("/v1/redemptions") { request, context in try await redeem(request, context: context) }
        router.post("/v1/grants/tokens") { request, context in
            let body = try await JSON.decode(
                GrantBody.self, from: request, context: context, limit: 4096, timeout: bodyTimeout)
            let outcome = try await vault.exchange(grant: body.grant, now: Date())
            return RedemptionResponse(outcome).response()
        }
        router.get("/v1/entitlements") { request, context in
            guard let players else { throw Problem(.notFound, "player identity is not configured: restore with the grant") }
            let player = try await players.player(authorization: request.headers[.authorization], now: Date())
            let after = try request.uri.queryParameters.get("cursor").map(Paging.cursor) ?? 0
            let owned = try await vault.entitlements(of: player, after: after, now: Date())
            context.logger.debug("entitlements", metadata: ["player": "\(player.id)", "count": "\(owned.items.count)"])
            return try JSON.response(Page(items: owned.items.map(EntitlementResponse.init), nextCursor: owned.next.map(String.init)))
        }
    }

    /// App Store Server Notifications V2: Apple posts `{"signedPayload": JWS}`. The signature is
    /// the authentication; REFUND and REVOKE of a redeemed transaction revoke it.
    func notification(_ request: Request, context: CofferRequestContext) async throws -> Response {
        let body = try await JSON.decode(
            NotificationBody.self, from: request, context: context, limit: 256 * 1024, timeout: bodyTimeout)
        let outcome = try await vault.handleNotification(body.signedPayload, now: Date())
        if outcome != .ignored {
            context.logger.notice("notification", metadata: ["result": "\(outcome.rawValue)"])
        }
        return try JSON.response(["result": outcome.rawValue])
    }

    func redeem(_ request: Request, context: CofferRequestContext) async throws -> Response {
        // The player is checked before the body is read: an unauthenticated client costs no verification.
        var player: Player?
        if let players { player = try await players.player(authorization: request.headers[.authorization], now: Date()) }
        let body = try await JSON.decode(
            RedeemBody.self, from: request, context: context, limit: jsonBodyLimit,
            timeout: bodyTimeout)
        let proof: RedemptionRequest.Proof
        switch (body.receipt, body.signedTransaction) {
        case (let receipt?, nil):
            guard let der = Base64.decode(receipt), !der.isEmpty else {
                throw Problem(.malformedRequest, "receipt is not base64")
            }
            proof = .receipt(der)
        case (nil, let jws?):
            proof = .signedTransaction(jws)
        default:
            throw Problem(.malformedRequest, "send exactly one of receipt (base64) or signedTransaction (JWS)")
        }
        if let token = body.appAccountToken, token.utf8.count > 64 {
            throw Problem(.malformedRequest, "appAccountToken is longer than 64 characters")
        }
        if let id = body.transactionId, id.isEmpty || id.utf8.count > 64 {
            throw Problem(.malformedRequest, "transactionId must be 1–64 characters")
        }
        let start = ContinuousClock.now
        let outcome: RedemptionOutcome
        do {
            outcome = try await vault.redeem(
                RedemptionRequest(
                    proof: proof, transactionId: body.transactionId, appAccountToken: body.appAccountToken, clientAddress: context.clientAddress,
                    player: player),
                now: Date())
        } catch {
            metrics.redemption(result: error.code.rawValue)
            throw error
        }
        metrics.redemption(result: outcome.restored ? "restored" : "redeemed")
        metrics.verificationSeconds.record(ContinuousClock.now - start)
        return RedemptionResponse(outcome).response(status: outcome.restored ? .ok : .created)
    }
}
