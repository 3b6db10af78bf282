import CofferCore
import Crypto
import Foundation
import Hummingbird
import Logging

/// `Authorization: Bearer <key>` (the scheme is case-insensitive, RFC 9110 §11.1): the key's
/// SHA-256 is looked up (keys are stored hashed, so the comparison is of digests; the lookup
/// is by an indexed unique column). No or unknown key → 401, revoked → 401, a key row the
/// ledger key did not sign → 401 (and an error in the log), wrong role → 403.
///
/// Failures throttle failing requests only: the key is looked up first, and a live key is
/// always let through, whatever else came from its address (NAT, proxies, a neighbour
/// guessing). An address that keeps sending bad keys gets 429 for its next bad keys — the
/// same answer for every wrong guess, so guessing stays at the failure rate.
struct APIKeyMiddleware: RouterMiddleware {
    typealias Context = CofferRequestContext
    let keys: any KeyRepository
    /// The ledger signing key's public half: only keys it signed are accepted.
    let ledgerKey: Curve25519.Signing.PublicKey
    let roles: Set<Role>
    let failures: RateLimiter
    let metrics: CofferMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let key: APIKey
        do {
            key = try await authenticate(request, logger: context.logger)
        } catch let problem as Problem where problem.status == .unauthorized {
            if let wait = failures.take(context.limitKey) {
                metrics.rateLimited(route: "authentication")
                context.logger.notice("authentication failed, address throttled", metadata: ["client": "\(context.clientAddress)"])
                throw Problem.rateLimited(wait)
            }
            context.logger.notice("authentication failed", metadata: ["client": "\(context.clientAddress)", "reason": "\(problem.detail)"])
            throw problem
        }
        guard roles.contains(key.role) else {
            throw Problem(.forbidden, "\(key.role == .auditor ? "an" : "a") \(key.role.rawValue) key may not do this")
        }
        var context = context
        context.identity = key
        return try await next(request, context)
    }

    /// The live key the request carries, or a 401 problem.
    private func authenticate(_ request: Request, logger: Logger) async throws -> APIKey {
        guard let header = request.headers[.authorization], let secret = Self.bearerCredentials(header) else {
            throw Problem(.unauthenticated, "send Authorization: Bearer <key>", headers: [.wwwAuthenticate: "Bearer"])
        }
        guard !secret.isEmpty, secret.utf8.count <= 256 else {
            throw Problem(.unauthenticated, "malformed bearer key", headers: [.wwwAuthenticate: "Bearer"])
        }
        let key: APIKey?
        do { key = try await keys.key(secretHash: APIKeys.hash(secret)) } catch {
            throw Problem.unavailable(internalDetail: "key lookup failed: \(error)")
        }
        guard let key, key.revokedAt == nil else {
            throw Problem(.unauthenticated, "unknown or revoked key", headers: [.wwwAuthenticate: "Bearer"])
        }
        // A key the ledger key did not sign was written into the database behind Coffer's back
        // (or changed there): the caller gets the answer an unknown key gets, the operator an error.
        guard key.isAuthentic(signedBy: ledgerKey) else {
            logger.error(
                "API key refused: its row is not signed by this server's ledger key (inserted or changed in the database outside Coffer?)",
                metadata: ["key": "\(key.displayName)"])
            throw Problem(.unauthenticated, "unknown or revoked key", headers: [.wwwAuthenticate: "Bearer"])
        }
        return key
    }

    /// The credentials of a `Bearer` authorization, the scheme matched case-insensitively and
    /// followed by one or more spaces or tabs; nil for any other scheme.
    static func bearerCredentials(_ header: String) -> String? {
        let utf8 = header.utf8
        guard utf8.count > 7 else { return nil }
        let scheme = utf8.prefix(6)
        guard String(decoding: scheme, as: UTF8.self).lowercased() == "bearer" else { return nil }
        let rest = utf8.dropFirst(6)
        guard let first = rest.first, first == UInt8(ascii: " ") || first == UInt8(ascii: "\t") else { return nil }
        return String(decoding: rest, as: UTF8.self).trimmingCharacters(in: .whitespaces)
    }
}

/// Creating and hashing API keys.
public enum APIKeys {
    public static func hash(_ secret: String) -> String { SHA256.hash(data: Array(secret.utf8)).hexString }

    /// Creates a key signed with the ledger signing key `signer` (the server's: it accepts only
    /// keys it signed) and returns the secret (shown once; only its hash is stored).
    public static func create(role: Role, name: String, in keys: any KeyRepository, signer: LedgerSigner, now: Date) async throws -> String {
        try await issue(role: role, name: name, in: keys, signer: signer, now: now).secret
    }

    /// ``create(role:name:in:signer:now:)``, also returning the key as stored; `logging` makes
    /// the admin-log entry stored with the key (in its transaction) from the key.
    public static func issue(
        role: Role, name: String, in keys: any KeyRepository, signer: LedgerSigner, now: Date, logging: ((APIKey) -> AdminAction)? = nil
    ) async throws -> (secret: String, key: APIKey) {
        var rng = SystemRandomNumberGenerator()
        let secret = "cof_\(role.rawValue)_" + Base64.encodeURL((0..<32).map { _ in UInt8.random(in: 0...255, using: &rng) })
        let key = try signer.signed(APIKey(keyId: UUID().uuidString.lowercased(), name: name, role: role, secretHash: hash(secret), createdAt: now))
        try await keys.create(key, logging: logging?(key))
        return (secret, key)
    }
}
