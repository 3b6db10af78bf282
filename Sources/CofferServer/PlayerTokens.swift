import CofferCore
import Foundation
import JWTKit

/// Player identity: the game's own login service issues short-lived player tokens (JWT:
/// `sub`, `iss`, `aud`, `exp`, optional `kid`), and Coffer verifies them offline with the
/// service's public keys (ES256 or EdDSA; PEM files or a JWKS file, several for rotation).
///
/// Only ES256 and EdDSA are accepted, and a token is checked against keys of its own `alg`
/// only: `alg: none`, HS256 (an attacker "signing" with the public key as an HMAC secret) and
/// any other algorithm are refused before a key is touched.
public struct PlayerTokens: Sendable {
    let es256: JWTKeyCollection
    let eddsa: JWTKeyCollection
    let hasES256: Bool
    let hasEdDSA: Bool
    public let issuer: String
    public let audience: String
    /// The claim whose value a signed `appAccountToken` must equal (a UUID).
    public let accountClaim: String
    /// How far a token's `nbf` may lie ahead of this server's clock.
    static let leeway: TimeInterval = 30
    /// The longest token read.
    static let maxTokenBytes = 8192

    /// Loads the keys of `keyFiles` (PEM public keys or JWKS documents).
    public static func load(keyFiles: [String], issuer: String, audience: String, accountClaim: String) async throws -> PlayerTokens {
        let es256 = JWTKeyCollection()
        let eddsa = JWTKeyCollection()
        var counts = (es256: 0, eddsa: 0)
        for (index, path) in keyFiles.enumerated() {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw CofferConfigurationError("player key \(path) cannot be read")
            }
            let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            if text.hasPrefix("{") {
                let added = try await addJWKS(text, path: path, es256: es256, eddsa: eddsa)
                counts.es256 += added.es256
                counts.eddsa += added.eddsa
            } else if text.contains("PRIVATE KEY") {
                throw CofferConfigurationError("player key \(path) is a private key: give Coffer the login service's public key")
            } else if let key = try? ES256PublicKey(pem: text) {
                await es256.add(ecdsa: key, kid: JWKIdentifier(string: "pem-\(index)"))
                counts.es256 += 1
            } else if let key = try? EdDSA.PublicKey(pem: text) {
                await eddsa.add(eddsa: key, kid: JWKIdentifier(string: "pem-\(index)"))
                counts.eddsa += 1
            } else {
                throw CofferConfigurationError("player key \(path) is neither a P-256 or Ed25519 PEM public key nor a JWKS document")
            }
        }
        guard counts.es256 + counts.eddsa > 0 else { throw CofferConfigurationError("player identity needs at least one --player-key") }
        return PlayerTokens(
            es256: es256, eddsa: eddsa, hasES256: counts.es256 > 0, hasEdDSA: counts.eddsa > 0, issuer: issuer, audience: audience,
            accountClaim: accountClaim)
    }

    /// Adds the ES256 (EC P-256) and EdDSA (OKP Ed25519) keys of a JWKS; any other key is an error.
    private static func addJWKS(_ text: String, path: String, es256: JWTKeyCollection, eddsa: JWTKeyCollection) async throws -> (
        es256: Int, eddsa: Int
    ) {
        struct Probe: Decodable {
            var kty: String?
            var crv: String?
            var alg: String?
        }
        struct Document: Decodable { var keys: [Probe] }
        guard let probes = try? JSONDecoder().decode(Document.self, from: Data(text.utf8)),
            let jwks = try? JSONDecoder().decode(JWKS.self, from: Data(text.utf8)), probes.keys.count == jwks.keys.count
        else {
            throw CofferConfigurationError("player key \(path) is not a JWKS document ({\"keys\":[…]})")
        }
        var counts = (es256: 0, eddsa: 0)
        for (probe, key) in zip(probes.keys, jwks.keys) {
            switch (probe.kty, probe.crv) {
            case ("EC", "P-256"):
                guard probe.alg == nil || probe.alg == "ES256" else {
                    throw CofferConfigurationError("player key \(path): an EC key for \(probe.alg ?? "")")
                }
                var jwk = key
                jwk.algorithm = .es256
                try await es256.add(jwk: jwk)
                counts.es256 += 1
            case ("OKP", "Ed25519"):
                var jwk = key
                jwk.algorithm = .eddsa
                try await eddsa.add(jwk: jwk)
                counts.eddsa += 1
            default:
                throw CofferConfigurationError(
                    "player key \(path) holds a \(probe.kty ?? "?") \(probe.crv ?? "") key: only EC P-256 (ES256) and OKP Ed25519 (EdDSA)")
            }
        }
        return counts
    }

    /// The claims Coffer reads; every other string claim is kept for ``accountClaim``.
    struct Claims: JWTPayload {
        var sub: String?
        var iss: String?
        var aud: [String]
        var exp: Double?
        var nbf: Double?
        var strings: [String: String]

        struct Key: CodingKey {
            var stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }

        init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: Key.self)
            var strings: [String: String] = [:]
            for key in c.allKeys { if let value = try? c.decode(String.self, forKey: key) { strings[key.stringValue] = value } }
            self.strings = strings
            sub = strings["sub"]
            iss = strings["iss"]
            let audKey = Key(stringValue: "aud")
            if let one = try? c.decode(String.self, forKey: audKey) {
                aud = [one]
            } else {
                aud = (try? c.decode([String].self, forKey: audKey)) ?? []
            }
            exp = try? c.decode(Double.self, forKey: Key(stringValue: "exp"))
            nbf = try? c.decode(Double.self, forKey: Key(stringValue: "nbf"))
        }

        func encode(to encoder: any Encoder) throws {}

        /// Claims are checked by ``PlayerTokens/player(authorization:now:)`` (precise codes), not here.
        func verify(using algorithm: some JWTAlgorithm) throws {}
    }

    /// The player of an `Authorization: Bearer` header: 401 `playerTokenRequired` without one,
    /// 401 `playerTokenInvalid` for a token that is malformed, of another algorithm, badly
    /// signed, expired or not yet valid, 403 `playerTokenRejected` for another issuer or
    /// audience.
    public func player(authorization: String?, now: Date) async throws(Problem) -> Player {
        guard let authorization, !authorization.isEmpty else {
            throw Self.unauthorized(.playerTokenRequired, "send the player's token: Authorization: Bearer <token>")
        }
        let parts = authorization.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else {
            throw Self.unauthorized(.playerTokenInvalid, "the Authorization header must be Bearer <player token>")
        }
        let token = parts[1].trimmingCharacters(in: .whitespaces)
        guard token.utf8.count <= Self.maxTokenBytes else { throw Self.unauthorized(.playerTokenInvalid, "the player token is too long") }
        let segments = token.split(separator: ".", omittingEmptySubsequences: false)
        guard segments.count == 3, let headerBytes = Base64.decodeURL(String(segments[0])),
            let header = try? JSONDecoder().decode([String: JSONScalar].self, from: Data(headerBytes)), case .string(let alg)? = header["alg"]
        else { throw Self.unauthorized(.playerTokenInvalid, "the player token is not a JWT") }
        let keys: JWTKeyCollection
        switch alg {
        case "ES256" where hasES256: keys = es256
        case "EdDSA" where hasEdDSA: keys = eddsa
        default:
            let allowed = [hasES256 ? "ES256" : nil, hasEdDSA ? "EdDSA" : nil].compactMap { $0 }.joined(separator: " or ")
            throw Self.unauthorized(
                .playerTokenInvalid, "player tokens must be signed with \(allowed), not \(LedgerText.escaped(alg, maxBytes: 16))")
        }
        let claims: Claims
        do {
            claims = try await keys.verify(token, as: Claims.self, iteratingKeys: true)
        } catch {
            throw Self.unauthorized(.playerTokenInvalid, "the player token's signature does not verify with any configured key")
        }
        guard let exp = claims.exp else { throw Self.unauthorized(.playerTokenInvalid, "the player token has no exp") }
        guard now.timeIntervalSince1970 < exp else { throw Self.unauthorized(.playerTokenInvalid, "the player token expired") }
        if let nbf = claims.nbf, now.timeIntervalSince1970 + Self.leeway < nbf {
            throw Self.unauthorized(.playerTokenInvalid, "the player token is not valid yet")
        }
        guard claims.iss == issuer else { throw Problem(.playerTokenRejected, "the player token was issued by another issuer") }
        guard claims.aud.contains(audience) else { throw Problem(.playerTokenRejected, "the player token is for another audience") }
        guard let sub = claims.sub, LedgerText.isIdentifier(sub) else {
            throw Self.unauthorized(
                .playerTokenInvalid, "the player token's sub must be 1–\(LedgerText.maxIdentifierBytes) bytes without control characters")
        }
        let account = claims.strings[accountClaim].flatMap(UUID.init(uuidString:))?.uuidString.lowercased()
        return Player(id: sub, accountToken: account)
    }
}

extension PlayerTokens {
    /// A 401 with the challenge RFC 6750 asks for.
    static func unauthorized(_ code: ProblemCode, _ detail: String) -> Problem {
        Problem(code, detail, headers: [.wwwAuthenticate: "Bearer realm=\"coffer-player\""])
    }
}

/// A JSON header value, enough to read `alg` without trusting the rest.
enum JSONScalar: Decodable {
    case string(String)
    case other

    init(from decoder: any Decoder) throws {
        if let s = try? decoder.singleValueContainer().decode(String.self) { self = .string(s) } else { self = .other }
    }
}
