import Crypto
import Foundation

/// Why the vault refused a request. `code` values are stable and appear in HTTP problem bodies.
public struct VaultFailure: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Kind: Sendable, Hashable {
        /// The request itself is unusable (400).
        case badRequest
        /// Verification or policy refused it (422).
        case unprocessable
        /// Nothing to sell here (404).
        case notFound
        /// Replay (409).
        case conflict
        /// Refunded or revoked (410).
        case gone
        /// A grant or token that does not authorise (403).
        case forbidden
        /// Storage failed (503): not the client's fault, and nothing was half-written.
        case unavailable
    }

    public var kind: Kind
    public var code: String
    public var detail: String

    public init(_ kind: Kind, _ code: String, _ detail: String) {
        self.kind = kind
        self.code = code
        self.detail = detail
    }

    public var description: String { "\(code): \(detail)" }

    public static func malformedRequest(_ detail: String) -> Self { .init(.badRequest, "malformedRequest", detail) }
    public static func verification(_ error: VerificationError) -> Self {
        .init(error.code == .malformed || error.code == .limitExceeded ? .badRequest : .unprocessable, error.code.rawValue, error.detail)
    }
}

/// A token handed out for one asset.
public struct IssuedAsset: Sendable, Hashable {
    public var asset: Asset
    public var token: String
    public var expiresAt: Date
}

/// A successful redemption (or a grant exchange): the ledger row and fresh download tokens.
public struct RedemptionOutcome: Sendable {
    public var redemption: Redemption
    /// The grant secret: only returned by the redemption itself, never by grant exchanges.
    public var grant: String?
    public var assets: [IssuedAsset]
}

/// What a client submits to redeem a purchase.
public struct RedemptionRequest: Sendable {
    public enum Proof: Sendable {
        /// A legacy app receipt (DER/BER bytes).
        case receipt([UInt8])
        /// A StoreKit 2 signed transaction (compact JWS).
        case signedTransaction(String)
    }

    public var proof: Proof
    /// Which transaction of a legacy receipt to redeem (required when it holds several catalogue purchases).
    public var transactionId: String?
    public var appAccountToken: String?
    public var clientAddress: String

    public init(proof: Proof, transactionId: String? = nil, appAccountToken: String? = nil, clientAddress: String) {
        self.proof = proof
        self.transactionId = transactionId
        self.appAccountToken = appAccountToken
        self.clientAddress = clientAddress
    }
}

/// The vault's rules: verify, pick the transaction, check the catalogue, redeem once, hand
/// out short-lived tokens. Storage is behind protocols; time is passed in.
public struct Vault: Sendable {
    public let verifier: AppStoreVerifier
    public let catalogue: any CatalogueRepository
    public let ledger: any LedgerRepository
    public let tokens: TokenSigner
    /// Lifetime of download tokens.
    public let tokenTTL: TimeInterval

    public init(
        verifier: AppStoreVerifier, catalogue: any CatalogueRepository, ledger: any LedgerRepository, tokens: TokenSigner,
        tokenTTL: TimeInterval = 600
    ) {
        self.verifier = verifier
        self.catalogue = catalogue
        self.ledger = ledger
        self.tokens = tokens
        self.tokenTTL = tokenTTL
    }

    /// The transaction a proof is about, once verified.
    struct Purchase {
        var transactionId: String
        var originalTransactionId: String?
        var productId: String
        var bundleId: String
        var environment: Environment
        var purchaseDate: Date?
        var quantity: Int
        var revokedAt: Date?
        var format: SourceFormat
        var appAccountToken: String?
    }

    /// Redeems a purchase exactly once. Every refusal is recorded in the ledger's attempts.
    public func redeem(_ request: RedemptionRequest, now: Date) async throws(VaultFailure) -> RedemptionOutcome {
        let proofBytes: [UInt8]
        switch request.proof {
        case .receipt(let bytes): proofBytes = bytes
        case .signedTransaction(let jws): proofBytes = Array(jws.utf8)
        }
        let proofHash = SHA256.hash(data: proofBytes).hexString
        var seenTransaction: String?
        var seenProduct: String?
        var replayRecorded = false
        do throws(VaultFailure) {
            let purchase = try await verify(request, now: now, seen: &seenTransaction, product: &seenProduct)
            guard let product = try await storage({ try await catalogue.product(purchase.productId) }) else {
                throw VaultFailure(.notFound, "unknownProduct", "product \(purchase.productId) is not in the catalogue")
            }
            guard product.bundleId == purchase.bundleId else {
                throw VaultFailure(.unprocessable, "bundleMismatch", "product \(product.productId) belongs to \(product.bundleId)")
            }
            if let revokedAt = purchase.revokedAt {
                throw VaultFailure(.gone, "revoked", "transaction \(purchase.transactionId) was refunded or revoked at \(RFC3339.format(revokedAt))")
            }
            let grant = Self.randomSecret()
            let row = Redemption(
                redemptionId: UUID().uuidString.lowercased(), transactionId: purchase.transactionId,
                originalTransactionId: purchase.originalTransactionId, productId: purchase.productId, bundleId: purchase.bundleId,
                environment: purchase.environment.rawValue, purchaseDate: purchase.purchaseDate, quantity: purchase.quantity,
                receiptSHA256: proofHash, sourceFormat: purchase.format, redeemedAt: now, clientAddress: request.clientAddress,
                appAccountToken: request.appAccountToken ?? purchase.appAccountToken, grantHash: Self.grantHash(grant))
            let replayDetail = "transaction \(purchase.transactionId) was already redeemed"
            let replay = RejectedAttempt(
                at: now, code: "alreadyRedeemed", detail: replayDetail, transactionId: purchase.transactionId, productId: purchase.productId,
                receiptSHA256: proofHash, clientAddress: request.clientAddress)
            switch try await storage({ try await ledger.insert(row, replay: replay) }) {
            case .alreadyRedeemed:
                replayRecorded = true
                throw VaultFailure(.conflict, "alreadyRedeemed", replayDetail)
            case .inserted(let stored):
                return RedemptionOutcome(redemption: stored, grant: grant, assets: try await issue(product, for: stored, now: now))
            }
        } catch {
            if error.kind != .unavailable && !replayRecorded {
                let attempt = RejectedAttempt(
                    at: now, code: error.code, detail: String(error.detail.prefix(500)), transactionId: seenTransaction, productId: seenProduct,
                    receiptSHA256: proofHash, clientAddress: request.clientAddress)
                _ = try? await ledger.record(attempt)
            }
            throw error
        }
    }

    /// Fresh tokens for a redemption's assets, in exchange for its grant secret.
    public func exchange(grant: String, now: Date) async throws(VaultFailure) -> RedemptionOutcome {
        guard grant.utf8.count <= 128,
            let redemption = try await storage({ try await ledger.redemption(grantHash: Self.grantHash(grant)) }),
            redemption.status == "redeemed"
        else { throw VaultFailure(.forbidden, "grantInvalid", "the grant is unknown or revoked") }
        guard try await storage({ try await ledger.revocation(transactionId: redemption.transactionId) }) == nil else {
            throw VaultFailure(.forbidden, "grantInvalid", "the grant is unknown or revoked")
        }
        guard let product = try await storage({ try await catalogue.product(redemption.productId) }) else {
            throw VaultFailure(.notFound, "unknownProduct", "product \(redemption.productId) is no longer in the catalogue")
        }
        return RedemptionOutcome(redemption: redemption, grant: nil, assets: try await issue(product, for: redemption, now: now))
    }

    /// What a notification did.
    public enum NotificationOutcome: String, Sendable {
        /// A redeemed transaction is now revoked.
        case revoked
        /// A refund or revocation of a transaction this vault never redeemed.
        case notRedeemed
        /// Already revoked (Apple retries notifications).
        case alreadyRevoked
        /// A notification type that changes nothing here.
        case ignored
    }

    /// Notification types that take a purchase back.
    static let revokingTypes: Set<String> = ["REFUND", "REVOKE"]

    /// Handles a verified App Store Server Notification V2 (`signedPayload`): REFUND and
    /// REVOKE of a redeemed transaction append a revocation event; its grant stops working.
    public func handleNotification(_ signedPayload: String, now: Date) async throws(VaultFailure) -> NotificationOutcome {
        let result = await verifier.verifySignedData(signedPayload, now: now)
        guard case .valid(let evidence) = result else {
            throw VaultFailure.verification(result.error ?? VerificationError(.malformed, "not a notification"))
        }
        guard case .notification(let notification) = evidence.signed else {
            throw VaultFailure(.unprocessable, "unsupportedFormat", "expected an App Store Server Notification V2 signedPayload")
        }
        guard let type = notification.notificationType, Self.revokingTypes.contains(type) else { return .ignored }
        guard let transaction = notification.transaction, let transactionId = transaction.transactionId else {
            throw VaultFailure(.unprocessable, "malformed", "a \(type) notification without a signed transaction")
        }
        let reason = [type, notification.subtype].compactMap { $0 }.joined(separator: "/")
        let revocation = Revocation(
            redemptionId: "", transactionId: transactionId, revokedAt: transaction.revocationDate?.date ?? now, reason: reason, source: .notification,
            reference: notification.notificationUUID ?? "", recordedAt: now)
        switch try await storage({ try await ledger.revoke(revocation) }) {
        case .revoked: return .revoked
        case .notRedeemed: return .notRedeemed
        case .alreadyRevoked: return .alreadyRevoked
        }
    }

    /// An admin takes a redemption back (chargeback handled outside Apple, abuse).
    public func revoke(transactionId: String, reason: String, by admin: String, now: Date) async throws(VaultFailure) -> Revocation {
        let revocation = Revocation(
            redemptionId: "", transactionId: transactionId, revokedAt: now, reason: reason, source: .admin, reference: admin, recordedAt: now)
        switch try await storage({ try await ledger.revoke(revocation) }) {
        case .revoked(let stored): return stored
        case .notRedeemed: throw VaultFailure(.notFound, "notRedeemed", "transaction \(transactionId) was never redeemed here")
        case .alreadyRevoked: throw VaultFailure(.conflict, "alreadyRevoked", "transaction \(transactionId) is already revoked")
        }
    }

    private func issue(_ product: Product, for redemption: Redemption, now: Date) async throws(VaultFailure) -> [IssuedAsset] {
        var issued: [IssuedAsset] = []
        let expiresAt = now.addingTimeInterval(tokenTTL)
        for assetId in product.assetIds {
            guard let asset = try await storage({ try await catalogue.asset(assetId) }) else { continue }
            let claims = DownloadClaims(
                assetId: asset.assetId, sha256: asset.sha256, redemptionId: redemption.redemptionId,
                expiresAt: Int64(expiresAt.timeIntervalSince1970.rounded(.down)))
            issued.append(IssuedAsset(asset: asset, token: tokens.mint(claims), expiresAt: Date(timeIntervalSince1970: Double(claims.expiresAt))))
        }
        return issued
    }

    private func verify(
        _ request: RedemptionRequest, now: Date, seen: inout String?, product: inout String?
    ) async throws(VaultFailure) -> Purchase {
        switch request.proof {
        case .receipt(let bytes):
            let result = await verifier.verifyReceipt(bytes, now: now)
            if let transactionId = request.transactionId { seen = transactionId }
            guard case .valid(let evidence) = result, let receipt = evidence.receipt, let environment = evidence.environment else {
                throw VaultFailure.verification(result.error ?? VerificationError(.malformed, "not a receipt"))
            }
            let record: InAppPurchase
            if let wanted = request.transactionId {
                guard let match = receipt.inApp.first(where: { $0.transactionId == wanted }) else {
                    throw VaultFailure(.unprocessable, "transactionNotInReceipt", "transaction \(wanted) is not in the receipt")
                }
                record = match
            } else {
                var sellable: [InAppPurchase] = []
                for p in receipt.inApp {
                    if let id = p.productId, try await storage({ try await catalogue.product(id) }) != nil { sellable.append(p) }
                }
                guard sellable.count <= 1 else {
                    throw VaultFailure(
                        .unprocessable, "transactionRequired", "the receipt holds \(sellable.count) catalogue purchases: name one in transactionId")
                }
                guard let only = sellable.first ?? (receipt.inApp.count == 1 ? receipt.inApp.first : nil) else {
                    throw VaultFailure(.notFound, "unknownProduct", "the receipt holds no purchase of a catalogue product")
                }
                record = only
            }
            guard let transactionId = record.transactionId, let productId = record.productId, let bundleId = receipt.bundleId else {
                throw VaultFailure(.unprocessable, "malformed", "the purchase record lacks a transaction id, product id or bundle id")
            }
            seen = transactionId
            product = productId
            return Purchase(
                transactionId: transactionId, originalTransactionId: record.originalTransactionId, productId: productId, bundleId: bundleId,
                environment: environment, purchaseDate: record.purchaseDate, quantity: Int(record.quantity ?? 1), revokedAt: record.cancellationDate,
                format: .appReceipt, appAccountToken: nil)
        case .signedTransaction(let jws):
            let result = await verifier.verifySignedData(jws, now: now)
            guard case .valid(let evidence) = result, let environment = evidence.environment else {
                if case .transaction(let t) = result.evidence.signed {
                    seen = t.transactionId
                    product = t.productId
                }
                throw VaultFailure.verification(result.error ?? VerificationError(.malformed, "not a signed transaction"))
            }
            guard case .transaction(let t) = evidence.signed else {
                throw VaultFailure(
                    .unprocessable, "unsupportedFormat", "only signed transactions can be redeemed, not \(evidence.kind?.rawValue ?? "this")")
            }
            seen = t.transactionId
            product = t.productId
            guard let transactionId = t.transactionId, let productId = t.productId, let bundleId = t.bundleId else {
                throw VaultFailure(.unprocessable, "malformed", "the transaction lacks a transaction id, product id or bundle id")
            }
            return Purchase(
                transactionId: transactionId, originalTransactionId: t.originalTransactionId, productId: productId, bundleId: bundleId,
                environment: environment, purchaseDate: t.purchaseDate?.date, quantity: t.quantity ?? 1, revokedAt: t.revocationDate?.date,
                format: .signedTransaction, appAccountToken: t.appAccountToken)
        }
    }

    /// Runs a storage call, turning its failure into a 503-class ``VaultFailure``.
    private func storage<T>(_ body: () async throws -> T) async throws(VaultFailure) -> T {
        do { return try await body() } catch { throw VaultFailure(.unavailable, "storageUnavailable", "storage failed: \(error)") }
    }

    /// 32 random bytes, base64url.
    static func randomSecret() -> String {
        var rng = SystemRandomNumberGenerator()
        var bytes: [UInt8] = []
        bytes.reserveCapacity(32)
        for _ in 0..<4 { withUnsafeBytes(of: rng.next()) { bytes.append(contentsOf: $0) } }
        return Base64.encodeURL(bytes)
    }

    /// The stored form of a grant secret.
    public static func grantHash(_ grant: String) -> String { SHA256.hash(data: Array(grant.utf8)).hexString }
}
