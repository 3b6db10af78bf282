import CofferCore
import Crypto
import Foundation
import Hummingbird

/// `Authorization: Bearer <key>`: the key's SHA-256 is looked up (keys are stored hashed, so
/// the comparison is of digests; the lookup is by an indexed unique column).
/// No or unknown key → 401, revoked → 401, wrong role → 403. An address that keeps sending
/// bad keys is refused with 429 before its next key is even looked up.
struct APIKeyMiddleware: RouterMiddleware {
    typealias Context = CofferRequestContext
    let keys: any KeyRepository
    let roles: Set<Role>
    let failures: RateLimiter
    let metrics: CofferMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        if let wait = failures.wouldAllow(context.clientAddress) {
            metrics.rateLimited(route: "authentication")
            throw Problem.rateLimited(wait)
        }
        do {
            return try await authenticated(request, context: context, next: next)
        } catch let problem as Problem where problem.status == .unauthorized {
            _ = failures.take(context.clientAddress)
            context.logger.notice("authentication failed", metadata: ["client": "\(context.clientAddress)", "reason": "\(problem.detail)"])
            throw problem
        }
    }

    private func authenticated(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer ") else {
            throw Problem(.unauthorized, "unauthenticated", "send Authorization: Bearer <key>", headers: [.wwwAuthenticate: "Bearer"])
        }
        let secret = header.dropFirst("Bearer ".count).trimmingCharacters(in: .whitespaces)
        guard !secret.isEmpty, secret.utf8.count <= 256 else {
            throw Problem(.unauthorized, "unauthenticated", "malformed bearer key", headers: [.wwwAuthenticate: "Bearer"])
        }
        let key: APIKey?
        do { key = try await keys.key(secretHash: APIKeys.hash(secret)) } catch {
            throw Problem(.serviceUnavailable, "storageUnavailable", "key lookup failed")
        }
        guard let key, key.revokedAt == nil else {
            throw Problem(.unauthorized, "unauthenticated", "unknown or revoked key", headers: [.wwwAuthenticate: "Bearer"])
        }
        guard roles.contains(key.role) else {
            throw Problem(.forbidden, "forbidden", "a \(key.role.rawValue) key may not do this")
        }
        var context = context
        context.identity = key
        return try await next(request, context)
    }
}

/// Creating and hashing API keys.
public enum APIKeys {
    public static func hash(_ secret: String) -> String { SHA256.hash(data: Array(secret.utf8)).hexString }

    /// Creates a key and returns the secret (shown once; only its hash is stored).
    public static func create(role: Role, name: String, in keys: any KeyRepository, now: Date) async throws -> String {
        var rng = SystemRandomNumberGenerator()
        let secret = "cof_\(role.rawValue)_" + Base64.encodeURL((0..<32).map { _ in UInt8.random(in: 0...255, using: &rng) })
        let key = APIKey(keyId: UUID().uuidString.lowercased(), name: name, role: role, secretHash: hash(secret), createdAt: now)
        try await keys.create(key)
        return secret
    }
}
