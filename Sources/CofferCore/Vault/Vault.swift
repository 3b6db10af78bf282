import Crypto
import Foundation

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
    /// The owner presented a purchase already theirs: fresh tokens, no new redemption.
    public var restored = false
    /// When a subscription's entitlement ends (nil: it does not).
    public var entitlementEndsAt: Date?

    public init(redemption: Redemption, grant: String?, assets: [IssuedAsset], restored: Bool = false, entitlementEndsAt: Date? = nil) {
        self.redemption = redemption
        self.grant = grant
        self.assets = assets
        self.restored = restored
        self.entitlementEndsAt = entitlementEndsAt
    }
}

/// A player, as the game's login service vouched for them (a verified player token).
public struct Player: Sendable, Hashable {
    /// The token's `sub`: recorded in the ledger, the owner of the purchases it redeems.
    public var id: String
    /// The UUID a signed `appAccountToken` must equal (the `sub`, or the configured claim),
    /// lower-cased; nil when that claim is not a UUID (then no signed token can match).
    public var accountToken: String?

    public init(id: String, accountToken: String?) {
        self.id = id
        self.accountToken = accountToken
    }
}

/// What a refund that is not a full one does.
public enum RefundPolicy: String, Sendable, Hashable, CaseIterable {
    /// Any refund revokes the purchase (the default).
    case revokeAny
    /// A prorated refund is recorded and the purchase still entitles; a full refund revokes.
    case revokeFullOnly
}

/// Whether legacy app receipts are redeemed. A legacy receipt carries neither the purchase's
/// `appAccountToken` nor its `inAppOwnershipType`, though StoreKit 2 signs both for the same
/// transaction: accepted, a purchase presented as a receipt binds to whichever player redeems
/// it first (the JWS of it would be refused `accountMismatch`), and a family member's shared
/// copy of a product that is not `familyShareable` unlocks it.
public enum LegacyReceiptPolicy: String, Sendable, Hashable, CaseIterable {
    /// Legacy receipts are redeemed (the default: older clients send them).
    case accept
    /// Only StoreKit 2 signed transactions are: a receipt is 422 `legacyReceiptRefused`.
    case refuse
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
    /// The verified player, when player identity is configured.
    public var player: Player?

    public init(proof: Proof, transactionId: String? = nil, appAccountToken: String? = nil, clientAddress: String, player: Player? = nil) {
        self.proof = proof
        self.transactionId = transactionId
        self.appAccountToken = appAccountToken
        self.clientAddress = clientAddress
        self.player = player
    }
}

/// What ``Vault/purchaseRefusals`` is asked to do: take one (whether one was left), give one
/// back (what it was taken for did not happen), or count a refusal left unwritten for want of one.
public enum RefusalBudgetOperation: Sendable { case take, giveBack, unrecorded }

/// The vault's rules: verify, pick the transaction, check the catalogue, redeem once, hand
/// out short-lived tokens. Storage is behind protocols; time is passed in.
public struct Vault: Sendable {
    public let verifier: AppStoreVerifier
    public let catalogue: any CatalogueRepository
    public let ledger: any LedgerRepository
    public let tokens: TokenSigner
    /// Lifetime of download tokens.
    public let tokenTTL: TimeInterval
    public let refundPolicy: RefundPolicy
    public let legacyReceipts: LegacyReceiptPolicy
    /// Whether the refusal of a proof that did not verify, from this client address, may be
    /// written to the ledger's attempts (the server's per-address budget: each is a chained
    /// row for good, and junk costs its sender nothing); one that may not is answered all the
    /// same.
    public let mayRecordRefusal: @Sendable (_ clientAddress: String) -> Bool
    /// The budget of refusals of a verified purchase (a replay, a revoked or unknown product…)
    /// written to the ledger, by its transaction id, from whatever address: `.take` spends one
    /// and says whether one was left — before the write that may refuse it, so that replays
    /// arriving together cannot all be told yes — and `.giveBack` returns it when that write
    /// inserted instead. One real purchase replayed from many addresses would otherwise add a
    /// chained row per replay, for good; its first ones per hour are what an auditor needs.
    public let purchaseRefusals: @Sendable (_ transactionId: String, _ operation: RefusalBudgetOperation) -> Bool
    /// What this instance answered in doubt (a write whose outcome was lost), for the retry.
    let inDoubt = InDoubtRedemptions()

    public init(
        verifier: AppStoreVerifier, catalogue: any CatalogueRepository, ledger: any LedgerRepository, tokens: TokenSigner,
        tokenTTL: TimeInterval = 600, refundPolicy: RefundPolicy = .revokeAny, legacyReceipts: LegacyReceiptPolicy = .accept,
        mayRecordRefusal: @escaping @Sendable (_ clientAddress: String) -> Bool = { _ in true },
        purchaseRefusals: @escaping @Sendable (_ transactionId: String, _ operation: RefusalBudgetOperation) -> Bool = { _, _ in true }
    ) {
        self.mayRecordRefusal = mayRecordRefusal
        self.purchaseRefusals = purchaseRefusals
        self.verifier = verifier
        self.catalogue = catalogue
        self.ledger = ledger
        self.tokens = tokens
        self.tokenTTL = tokenTTL
        self.refundPolicy = refundPolicy
        self.legacyReceipts = legacyReceipts
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
        /// The StoreKit 2 product type; nil for legacy receipts (and unknown types).
        var storeKitType: AppStoreProductType?
        /// A subscription's end (legacy field 1708, JWS `expiresDate`); nil for other purchases.
        var expiresDate: Date?
        /// `inAppOwnershipType` (PURCHASED, FAMILY_SHARED); nil for legacy receipts.
        var ownershipType: String? = nil
        /// A subscription transaction replaced by an upgrade.
        var isUpgraded = false
    }

    /// What the ledger records of a proof that was refused, and whether its identifiers are
    /// facts (from a verified proof) or claims.
    struct Seen {
        var transactionId: String?
        var productId: String?
        var claimed = true
    }

    /// Redeems a purchase exactly once. Every refusal is recorded in the ledger's attempts,
    /// except requests whose own fields are malformed (refused before anything is written)
    /// and those of proofs that did not verify beyond the address's budget (``mayRecordRefusal``).
    public func redeem(_ request: RedemptionRequest, now: Date) async throws(VaultFailure) -> RedemptionOutcome {
        if let id = request.transactionId, !LedgerText.isIdentifier(id) {
            throw .malformedRequest("transactionId must be 1–\(LedgerText.maxIdentifierBytes) bytes without control characters")
        }
        if let token = request.appAccountToken, UUID(uuidString: token) == nil {
            throw .malformedRequest("appAccountToken must be a UUID")
        }
        let proofBytes: [UInt8]
        switch request.proof {
        case .receipt(let bytes): proofBytes = bytes
        case .signedTransaction(let jws): proofBytes = Array(jws.utf8)
        }
        let proofHash = SHA256.hash(data: proofBytes).hexString
        var seen = Seen()
        var refusalRecorded = false
        do throws(VaultFailure) {
            let purchase = try await verify(request, now: now, seen: &seen)
            let product = try await product(for: purchase, now: now)
            return try await insert(purchase, of: product, request: request, proofHash: proofHash, now: now, refusalRecorded: &refusalRecorded)
        } catch {
            // A proof that did not verify is charged to its address's budget; a verified one's
            // refusal (a replay, a revoked or another player's purchase) to its purchase's.
            if !error.isUnavailable && !refusalRecorded
                && (seen.claimed ? mayRecordRefusal(request.clientAddress) : takesPurchaseRefusal(seen.transactionId ?? ""))
            {
                let attempt = RejectedAttempt(
                    at: now, code: error.code.rawValue, detail: LedgerText.escaped(error.detail, maxBytes: LedgerText.maxDetailBytes),
                    transactionId: seen.claimed ? LedgerText.claimed(seen.transactionId) : seen.transactionId,
                    productId: seen.claimed ? LedgerText.claimed(seen.productId) : seen.productId, receiptSHA256: proofHash,
                    clientAddress: request.clientAddress, claimed: seen.claimed)
                _ = try? await ledger.record(attempt)
            }
            throw error
        }
    }

    /// Whether a refusal of the purchase `transactionId` may be written (one taken from its
    /// budget); one that may not is counted.
    private func takesPurchaseRefusal(_ transactionId: String) -> Bool {
        if purchaseRefusals(transactionId, .take) { return true }
        _ = purchaseRefusals(transactionId, .unrecorded)
        return false
    }

    /// The catalogue product a verified purchase buys, if this app sells it as that type and
    /// it was not refunded.
    private func product(for purchase: Purchase, now: Date) async throws(VaultFailure) -> Product {
        guard let product = try await storage({ try await catalogue.product(purchase.productId) }) else {
            throw VaultFailure(.unknownProduct, "product \(purchase.productId) is not in the catalogue")
        }
        guard product.bundleId == purchase.bundleId else {
            throw VaultFailure(.bundleMismatch, "product \(product.productId) belongs to \(product.bundleId)")
        }
        try Self.checkType(purchase, against: product)
        if purchase.ownershipType == "FAMILY_SHARED" && !product.familyShareable {
            throw VaultFailure(.familySharingNotAllowed, "product \(product.productId) is not family-shareable and this copy is shared")
        }
        if purchase.isUpgraded {
            throw VaultFailure(
                .upgradedTransaction, "transaction \(purchase.transactionId) was upgraded to another subscription: redeem the upgrade's transaction")
        }
        if let revokedAt = purchase.revokedAt {
            throw VaultFailure(.revoked, "transaction \(purchase.transactionId) was refunded or revoked at \(RFC3339.format(revokedAt))")
        }
        return product
    }

    /// Appends the redemption (once durable, tokens are issued); a replay or a purchase revoked
    /// before it was redeemed is refused, its attempt recorded in the same write
    /// (`refusalRecorded`). A purchase already in the ledger goes to ``again(_:_:of:request:now:)``
    /// when a player presents it or it is a subscription: its owner restores it, a renewal extends it.
    private func insert(
        _ purchase: Purchase, of product: Product, request: RedemptionRequest, proofHash: String, now: Date, refusalRecorded: inout Bool
    ) async throws(VaultFailure) -> RedemptionOutcome {
        let appAccountToken = try Self.appAccountToken(signed: purchase.appAccountToken, sent: request.appAccountToken)
        if let player = request.player { try Self.bind(appAccountToken, to: player) }
        let replayKey = Self.replayKey(
            type: product.type, transactionId: purchase.transactionId, original: purchase.originalTransactionId, productId: product.productId)
        let environment = purchase.environment.rawValue
        let expiresAt = try Self.entitlementEnd(purchase, of: product)
        let looksAgain = request.player != nil || product.type == .autoRenewable
        // Read before anything is written: a purchase is never used up by a redemption whose
        // assets cannot be handed out (a store failure, a row the admin log does not back).
        let assets = try await catalogued(product)
        // A redemption of this purchase this instance answered 503 in doubt: this retry gets it
        // if it did commit (``InDoubtRedemptions``). A dictionary lookup unless one is kept.
        if inDoubt.holds(environment: environment, replayKey: replayKey, now: now),
            let resolved = try await resolveInDoubt(
                environment: environment, replayKey: replayKey, assets: assets, request: request, proofHash: proofHash, now: now)
        {
            return resolved
        }
        if looksAgain, let existing = try await storage({ try await ledger.redemption(environment: environment, replayKey: replayKey) }) {
            return try await again(existing, purchase, of: product, assets: assets, request: request, now: now)
        }
        // When the entitlement ends: the transaction's own end, or later when the ledger
        // already holds a later one (renewals, a grace period notified before the redemption).
        var endsAt = expiresAt
        if let expiresAt {
            let events = try await storage({ try await ledger.purchaseEvents(environment: environment, replayKey: replayKey) })
            let probe = Redemption(
                redemptionId: "", transactionId: purchase.transactionId, originalTransactionId: nil, productId: product.productId, bundleId: "",
                environment: environment, purchaseDate: nil, quantity: 1, receiptSHA256: "", sourceFormat: purchase.format, redeemedAt: now,
                clientAddress: "", appAccountToken: nil, grantHash: "", expiresAt: expiresAt)
            let folded = Entitlement.fold(probe, revocation: nil, events: events, now: now)
            if folded.state == .expired {
                throw VaultFailure(.expired, "the subscription transaction \(purchase.transactionId) expired at \(RFC3339.format(expiresAt))")
            }
            endsAt = folded.endsAt
        }
        let grant = Self.randomSecret()
        let row = Redemption(
            redemptionId: Self.randomRedemptionId(), transactionId: purchase.transactionId,
            originalTransactionId: purchase.originalTransactionId, productId: purchase.productId, bundleId: purchase.bundleId,
            environment: environment, purchaseDate: purchase.purchaseDate, quantity: purchase.quantity,
            receiptSHA256: proofHash, sourceFormat: purchase.format, redeemedAt: now, clientAddress: request.clientAddress,
            appAccountToken: appAccountToken, grantHash: Self.grantHash(grant), replayKey: replayKey, playerId: request.player?.id,
            expiresAt: expiresAt)
        let replayDetail =
            replayKey == purchase.transactionId
            ? "transaction \(purchase.transactionId) was already redeemed"
            : "purchase \(replayKey) (transaction \(purchase.transactionId)) was already redeemed"
        let revokedDetail = "purchase \(replayKey) was refunded or revoked before it was redeemed"
        func attempt(_ code: ProblemCode, _ detail: String) -> RejectedAttempt {
            RejectedAttempt(
                at: now, code: code.rawValue, detail: detail, transactionId: purchase.transactionId, productId: purchase.productId,
                receiptSHA256: proofHash, clientAddress: request.clientAddress, claimed: false)
        }
        // When a replay may still be a restore or a renewal, its attempt is not recorded with the
        // refused insert: the outcome depends on the row that won (recorded then, if refused).
        let refusals = InsertRefusals(replay: attempt(.alreadyRedeemed, replayDetail), revoked: attempt(.revoked, revokedDetail))
        // Taken now (replays arriving together each take their own), given back if this inserts.
        let recordsRefusal = !looksAgain && purchaseRefusals(purchase.transactionId, .take)
        let inserted: LedgerInsertOutcome
        do { inserted = try await ledger.insert(row, refusals: recordsRefusal ? refusals : nil) } catch let doubt as LedgerWriteInDoubt {
            // Only a row the write would have inserted (not one it refused as a replay): no
            // refusal of it can have been written either.
            if doubt.redemptionIds.contains(row.redemptionId) {
                inDoubt.keep(row, grant: grant, until: now.addingTimeInterval(tokenTTL), now: now)
                if recordsRefusal { _ = purchaseRefusals(purchase.transactionId, .giveBack) }
            }
            throw VaultFailure(.storageUnavailable, "storage failed: \(doubt)")
        } catch {
            // Nothing was written.
            if recordsRefusal { _ = purchaseRefusals(purchase.transactionId, .giveBack) }
            throw VaultFailure(.storageUnavailable, "storage failed: \(error)")
        }
        switch inserted {
        case .alreadyRedeemed:
            if looksAgain, let existing = try await storage({ try await ledger.redemption(environment: environment, replayKey: replayKey) }) {
                return try await again(existing, purchase, of: product, assets: assets, request: request, now: now)
            }
            // Written with the insert, or over the purchase's budget: either way dealt with — unless
            // the outcome still had to be looked at (a restore), when the caller records it.
            refusalRecorded = !looksAgain
            if !looksAgain && !recordsRefusal { _ = purchaseRefusals(purchase.transactionId, .unrecorded) }
            throw VaultFailure(.alreadyRedeemed, replayDetail)
        case .revoked:
            refusalRecorded = !looksAgain
            if !looksAgain && !recordsRefusal { _ = purchaseRefusals(purchase.transactionId, .unrecorded) }
            throw VaultFailure(.revoked, revokedDetail)
        case .inserted(let stored):
            if recordsRefusal { _ = purchaseRefusals(purchase.transactionId, .giveBack) }
            return RedemptionOutcome(
                redemption: stored, grant: grant, assets: issue(assets, for: stored, now: now, endsAt: endsAt), entitlementEndsAt: endsAt)
        }
    }

    /// The redemption this instance answered in doubt for this purchase, if the ledger holds
    /// it durably and the request is its requester's (``InDoubtRedemptions``) — with its
    /// grant, once — while it entitles. 503 while the earlier write may still commit.
    private func resolveInDoubt(
        environment: String, replayKey: String, assets: [Asset], request: RedemptionRequest, proofHash: String, now: Date
    ) async throws(VaultFailure) -> RedemptionOutcome? {
        // What it reads must be durable before anything is handed out (a committed row whose
        // flush failed is what put it in doubt).
        try await storage({ try await ledger.ensureDurable() })
        let stored = try await storage({ try await ledger.redemption(environment: environment, replayKey: replayKey) })
        let resolution = inDoubt.take(
            environment: environment, replayKey: replayKey, stored: stored, player: request.player, proofHash: proofHash,
            clientAddress: request.clientAddress, now: now)
        switch resolution {
        case .none: return nil
        case .unsettled:
            throw VaultFailure(.storageUnavailable, "an earlier redemption of this purchase may still be committing: retry")
        case .handOut(let kept):
            guard let stored else { return nil }
            let entitlement = try await entitlement(of: stored, now: now)
            try Self.checkEntitles(entitlement)
            return RedemptionOutcome(
                redemption: stored, grant: kept.grant, assets: issue(assets, for: stored, now: now, endsAt: entitlement.endsAt),
                entitlementEndsAt: entitlement.endsAt)
        }
    }

    /// A purchase the ledger already holds, presented again. A newer transaction of a
    /// subscription (a renewal) extends it, whoever presents it (Apple signed it). Its owner —
    /// the same player — restores it: a chained restore event and fresh tokens while it
    /// entitles. Anyone else: 409 `alreadyRedeemed`.
    private func again(
        _ existing: Redemption, _ purchase: Purchase, of product: Product, assets: [Asset], request: RedemptionRequest, now: Date
    ) async throws(VaultFailure) -> RedemptionOutcome {
        let key = existing.effectiveReplayKey
        var events = try await storage({ try await ledger.purchaseEvents(environment: existing.environment, replayKey: key) })
        if product.type == .autoRenewable, let expires = purchase.expiresDate, purchase.transactionId != existing.transactionId,
            !events.contains(where: {
                $0.transactionId == purchase.transactionId && ($0.knownKind == .renewal || ($0.knownKind == .recordedOnly && $0.source == .client))
            })
        {
            let kind = try await periodKind(.renewal, of: existing, purchasedAt: purchase.purchaseDate, events: events, now: now)
            let renewal = PurchaseEvent(
                at: now, kind: kind, environment: existing.environment, replayKey: key, redemptionId: existing.redemptionId,
                transactionId: purchase.transactionId, playerId: existing.playerId, expiresAt: expires,
                detail: "renewal presented by a client from \(request.clientAddress)", source: .client, reference: existing.redemptionId)
            if case .appended(let stored) = try await storage({ try await ledger.append(renewal) }) { events.append(stored) }
        }
        // Byte for byte, as the stores compare: canonically equivalent but different ids are different players.
        guard let player = request.player, let owner = existing.playerId, owner.utf8.elementsEqual(player.id.utf8) else {
            let detail =
                existing.effectiveReplayKey == purchase.transactionId
                ? "transaction \(purchase.transactionId) was already redeemed"
                : "purchase \(key) (transaction \(purchase.transactionId)) was already redeemed"
            throw VaultFailure(.alreadyRedeemed, detail)
        }
        let entitlement = try await entitlement(of: existing, events: events, now: now)
        try Self.checkEntitles(entitlement)
        // One restore event per purchase and token lifetime: a client repeating its restore
        // gets fresh tokens without growing the ledger by an entry per request.
        let recent = events.last { $0.knownKind == .restore && $0.at > now.addingTimeInterval(-tokenTTL) && $0.at <= now }
        if recent == nil {
            let restore = PurchaseEvent(
                at: now, kind: .restore, environment: existing.environment, replayKey: key, redemptionId: existing.redemptionId,
                transactionId: purchase.transactionId, playerId: player.id, detail: "restored by its player from \(request.clientAddress)",
                source: .client, reference: existing.redemptionId)
            _ = try await storage({ try await ledger.append(restore) })
        }
        return RedemptionOutcome(
            redemption: existing, grant: nil, assets: issue(assets, for: existing, now: now, endsAt: entitlement.endsAt), restored: true,
            entitlementEndsAt: entitlement.endsAt)
    }

    /// How a subscription period presented (`.renewal`) or notified (`.subscriptionStatus`)
    /// for a redeemed purchase is recorded: as itself, unless the purchase is revoked now and
    /// the period was not paid after the revocation — the transaction bought at or before it
    /// (a period the refund took back, or one that was current when an admin revoked the pass,
    /// presented or notified late), or the revocation is an admin's or a REVOKE, which no
    /// payment lifts. Then `recordedOnly`: its end still counts should the revocation be
    /// reversed, but it does not reinstate (``Entitlement/fold(_:revocation:events:now:)``).
    func periodKind(
        _ kind: PurchaseEvent.Kind, of existing: Redemption, purchasedAt: Date?, events: [PurchaseEvent], now: Date
    ) async throws(VaultFailure) -> PurchaseEvent.Kind {
        // Whenever a revocation holds (revoked now, or lifted by a paid period that has since
        // lapsed), not only when the state says revoked.
        guard let revocation = try await storage({ try await ledger.revocation(of: existing) }),
            Entitlement.revocationHolds(afterEventKinds: events.sorted { $0.sequence < $1.sequence }.map(\.kind))
        else { return kind }
        let revokedAt =
            events.filter { $0.knownKind == .revokedAgain }.max { $0.sequence < $1.sequence }?.at ?? revocation.revokedAt
        // Every revocation an Apple refund (an admin's or a REVOKE among them: no payment lifts it).
        guard Self.reversible(revocation, events), let purchasedAt, purchasedAt > revokedAt else { return .recordedOnly }
        return kind
    }

    /// With player identity, a signed `appAccountToken` must be the player's UUID.
    static func bind(_ signed: String?, to player: Player) throws(VaultFailure) {
        guard let signed else { return }
        guard let account = player.accountToken, account == signed.lowercased() else {
            throw VaultFailure(.accountMismatch, "the purchase's appAccountToken is not this player's account")
        }
    }

    /// When a new redemption's entitlement ends: an auto-renewable transaction's `expiresDate`,
    /// a non-renewing purchase's date plus the product's duration; nil for the other types.
    static func entitlementEnd(_ purchase: Purchase, of product: Product) throws(VaultFailure) -> Date? {
        switch product.type {
        case .consumable, .nonConsumable: return nil
        case .autoRenewable:
            guard let expires = purchase.expiresDate else {
                throw VaultFailure.incomplete("the subscription transaction \(purchase.transactionId) carries no expiresDate")
            }
            return expires
        case .nonRenewing:
            if let expires = purchase.expiresDate { return expires }
            guard let start = purchase.purchaseDate, let duration = product.durationSeconds else {
                throw VaultFailure.incomplete("the non-renewing purchase \(purchase.transactionId) has no purchase date or the product no duration")
            }
            return start.addingTimeInterval(TimeInterval(duration))
        }
    }

    /// The replay key of a purchase: a non-consumable is one purchase however many times it is
    /// restored (each restore has a new transaction id, the same original transaction id). An
    /// auto-renewable subscription is one purchase per product however often it renews:
    /// `original:productId` — a switch to another product of the subscription group keeps the
    /// original transaction id but is another purchase, with its own assets and its own end.
    public static func replayKey(type: ProductType, transactionId: String, original: String?, productId: String = "") -> String {
        switch type {
        case .nonConsumable: original ?? transactionId
        case .autoRenewable: (original ?? transactionId) + ":" + productId
        case .consumable, .nonRenewing: transactionId
        }
    }

    /// The app account token to record: the signed one. A client may send one to have it
    /// checked, never to supply or override it.
    static func appAccountToken(signed: String?, sent: String?) throws(VaultFailure) -> String? {
        guard let sent else { return signed }
        guard let signed else {
            throw VaultFailure(.appAccountTokenMismatch, "the purchase carries no signed appAccountToken to match \(sent)")
        }
        guard signed.lowercased() == sent.lowercased() else {
            throw VaultFailure(.appAccountTokenMismatch, "the signed appAccountToken is not the one sent")
        }
        return signed
    }

    /// The purchase must be of the catalogue product's type. A legacy receipt tells only
    /// subscriptions apart (by their expiry).
    static func checkType(_ purchase: Purchase, against product: Product) throws(VaultFailure) {
        let type: ProductType?
        switch purchase.format {
        case .signedTransaction: type = purchase.storeKitType.map(ProductType.init)
        case .appReceipt:
            if purchase.expiresDate != nil {
                type = .autoRenewable
            } else {
                type = product.type == .autoRenewable ? nil : product.type
            }
        }
        guard type == product.type else {
            throw VaultFailure(
                .productTypeMismatch,
                "product \(product.productId) is \(product.type.rawValue) but the transaction is \(purchase.storeKitType?.rawValue ?? (purchase.expiresDate != nil ? "a subscription" : "of no known type"))"
            )
        }
    }

    /// Fresh tokens for a redemption's assets, in exchange for its grant secret, while it
    /// entitles: a revoked purchase's grant is unknown (403 `grantInvalid`), a lapsed
    /// subscription's is 403 `entitlementExpired`.
    public func exchange(grant: String, now: Date) async throws(VaultFailure) -> RedemptionOutcome {
        guard grant.utf8.count <= 128,
            let redemption = try await storage({ try await ledger.redemption(grantHash: Self.grantHash(grant)) }),
            redemption.knownStatus == .redeemed
        else { throw VaultFailure(.grantInvalid, "the grant is unknown or revoked") }
        let entitlement = try await entitlement(of: redemption, now: now)
        guard entitlement.state != .revoked else { throw VaultFailure(.grantInvalid, "the grant is unknown or revoked") }
        try Self.checkEntitles(entitlement)
        guard let product = try await storage({ try await catalogue.product(redemption.productId) }) else {
            throw VaultFailure(.unknownProduct, "product \(redemption.productId) is no longer in the catalogue")
        }
        return RedemptionOutcome(
            redemption: redemption, grant: nil, assets: issue(try await catalogued(product), for: redemption, now: now, endsAt: entitlement.endsAt),
            entitlementEndsAt: entitlement.endsAt)
    }

    /// An admin takes a redemption back (chargeback handled outside Apple, abuse). The
    /// transaction id is looked up in every environment unless `environment` is given.
    /// `logging` is the admin-log entry of the revocation, stored in its transaction.
    public func revoke(
        transactionId: String, environment: Environment? = nil, reason: String, by admin: String, now: Date, logging: AdminAction? = nil
    ) async throws(VaultFailure) -> Revocation {
        guard LedgerText.isIdentifier(transactionId) else {
            throw .malformedRequest("transactionId must be 1–\(LedgerText.maxIdentifierBytes) bytes without control characters")
        }
        var filter = AuditFilter()
        filter.transactionId = transactionId
        filter.limit = 10
        let found = try await storage({ try await ledger.redemptions(filter) }).filter {
            environment == nil || $0.knownEnvironment == environment
        }
        guard let redemption = found.first else {
            throw VaultFailure(.notRedeemed, "transaction \(transactionId) was never redeemed here")
        }
        guard found.count == 1 else {
            throw VaultFailure(
                .ambiguousTransaction,
                "transaction \(transactionId) was redeemed in \(found.map(\.environment).joined(separator: " and ")): name the environment")
        }
        let revocation = Revocation(
            redemptionId: "", transactionId: transactionId, revokedAt: now, reason: LedgerText.escaped(reason, maxBytes: 512), source: .admin,
            reference: LedgerText.escaped(admin, maxBytes: 128), recordedAt: now, environment: redemption.environment,
            replayKey: redemption.effectiveReplayKey)
        switch try await storage({ try await ledger.revoke(revocation, keepUnredeemed: false, logging: logging) }) {
        case .revoked(let stored), .recordedUnredeemed(let stored): return stored
        case .notRedeemed: throw VaultFailure(.notRedeemed, "transaction \(transactionId) was never redeemed here")
        case .alreadyRevoked:
            // Revoked once, then reinstated (REFUND_REVERSED): revoked again, as a chained event.
            // Also while only Apple's refunds revoke it: a reversal or a period paid after them
            // would lift those, never an admin's revocation — so it is recorded.
            guard let first = try await storage({ try await ledger.revocation(of: redemption) }) else {
                throw VaultFailure(.alreadyRevoked, "transaction \(transactionId) is already revoked")
            }
            let events = try await storage({
                try await ledger.purchaseEvents(environment: redemption.environment, replayKey: redemption.effectiveReplayKey)
            })
            guard Entitlement.fold(redemption, revocation: first, events: events, now: now).state != .revoked || Self.reversible(first, events)
            else { throw VaultFailure(.alreadyRevoked, "transaction \(transactionId) is already revoked") }
            let again = PurchaseEvent(
                at: now, kind: .revokedAgain, environment: redemption.environment, replayKey: redemption.effectiveReplayKey,
                redemptionId: redemption.redemptionId, transactionId: transactionId, playerId: redemption.playerId, detail: revocation.reason,
                source: .admin, reference: revocation.reference)
            _ = try await storage({ try await ledger.append(again, logging: logging) })
            var answered = first
            answered.revokedAt = now
            answered.reason = revocation.reason
            answered.source = .admin
            answered.reference = revocation.reference
            answered.recordedAt = now
            return answered
        }
    }

    /// The latest version of each of `product`'s assets the catalogue holds.
    func catalogued(_ product: Product) async throws(VaultFailure) -> [Asset] {
        var assets: [Asset] = []
        for assetId in product.assetIds {
            if let asset = try await storage({ try await catalogue.asset(assetId) }) { assets.append(asset) }
        }
        return assets
    }

    /// Tokens for a redemption's assets, valid for the token lifetime and never past the
    /// entitlement's end (`endsAt`).
    func issue(_ assets: [Asset], for redemption: Redemption, now: Date, endsAt: Date?) -> [IssuedAsset] {
        var issued: [IssuedAsset] = []
        let expiresAt = min(now.addingTimeInterval(tokenTTL), endsAt ?? .distantFuture)
        for asset in assets {
            let claims = DownloadClaims(
                assetId: asset.assetId, sha256: asset.sha256, redemptionId: redemption.redemptionId,
                expiresAt: Int64(expiresAt.timeIntervalSince1970.rounded(.down)))
            issued.append(IssuedAsset(asset: asset, token: tokens.mint(claims), expiresAt: Date(timeIntervalSince1970: Double(claims.expiresAt))))
        }
        return issued
    }

    private func verify(_ request: RedemptionRequest, now: Date, seen: inout Seen) async throws(VaultFailure) -> Purchase {
        let purchase: Purchase
        switch request.proof {
        case .receipt(let bytes):
            // Refused before any signature is checked.
            guard legacyReceipts == .accept else {
                throw VaultFailure(
                    .legacyReceiptRefused,
                    "this server redeems StoreKit 2 signed transactions only (`signedTransaction`): a legacy receipt carries no signed appAccountToken or ownership type"
                )
            }
            purchase = try await verifyReceipt(bytes, request: request, now: now, seen: &seen)
        case .signedTransaction(let jws): purchase = try await verifySignedTransaction(jws, now: now, seen: &seen)
        }
        // Signed is not the same as safe to store: a trusted test root can sign anything.
        for value in [purchase.transactionId, purchase.productId, purchase.bundleId] + [purchase.originalTransactionId].compactMap({ $0 })
        where !LedgerText.isIdentifier(value) {
            throw VaultFailure.incomplete(
                "an identifier of the purchase is longer than \(LedgerText.maxIdentifierBytes) bytes or holds control characters")
        }
        if let token = purchase.appAccountToken, UUID(uuidString: token) == nil {
            throw VaultFailure.incomplete("the signed appAccountToken is not a UUID")
        }
        seen.claimed = false
        return purchase
    }

    /// A legacy receipt's purchase: the one named by `transactionId`, else the only catalogue
    /// product in it.
    private func verifyReceipt(_ bytes: [UInt8], request: RedemptionRequest, now: Date, seen: inout Seen) async throws(VaultFailure) -> Purchase {
        let result = await verifier.verifyReceipt(bytes, now: now)
        if let transactionId = request.transactionId { seen.transactionId = transactionId }
        guard case .valid(let evidence) = result, let receipt = evidence.receipt, let environment = evidence.environment else {
            throw VaultFailure.verification(result.error ?? VerificationError(.malformed, "not a receipt"))
        }
        let record = try await inAppRecord(in: receipt, wanted: request.transactionId)
        seen.transactionId = record.transactionId
        seen.productId = record.productId
        guard let transactionId = record.transactionId, let productId = record.productId, let bundleId = receipt.bundleId else {
            throw VaultFailure.incomplete("the purchase record lacks a transaction id, product id or bundle id")
        }
        return Purchase(
            transactionId: transactionId, originalTransactionId: record.originalTransactionId, productId: productId, bundleId: bundleId,
            environment: environment, purchaseDate: record.purchaseDate, quantity: try Self.quantity(record.quantity),
            revokedAt: record.cancellationDate,
            format: .appReceipt, appAccountToken: nil, storeKitType: nil, expiresDate: record.expiresDate)
    }

    /// The in-app record to redeem: `wanted`, or the receipt's only purchase of a catalogue product.
    private func inAppRecord(in receipt: AppReceipt, wanted: String?) async throws(VaultFailure) -> InAppPurchase {
        if let wanted {
            guard let match = receipt.inApp.first(where: { $0.transactionId == wanted }) else {
                throw VaultFailure(.transactionNotInReceipt, "transaction \(wanted) is not in the receipt")
            }
            return match
        } else {
            var sellable: [InAppPurchase] = []
            for p in receipt.inApp {
                if let id = p.productId, try await storage({ try await catalogue.product(id) }) != nil { sellable.append(p) }
            }
            guard sellable.count <= 1 else {
                throw VaultFailure(.transactionRequired, "the receipt holds \(sellable.count) catalogue purchases: name one in transactionId")
            }
            guard let only = sellable.first ?? (receipt.inApp.count == 1 ? receipt.inApp.first : nil) else {
                throw VaultFailure(.unknownProduct, "the receipt holds no purchase of a catalogue product")
            }
            return only
        }
    }

    /// A StoreKit 2 signed transaction's purchase.
    private func verifySignedTransaction(_ jws: String, now: Date, seen: inout Seen) async throws(VaultFailure) -> Purchase {
        let result = await verifier.verifySignedData(jws, now: now)
        guard case .valid(let evidence) = result, let environment = evidence.environment else {
            if case .transaction(let t) = result.evidence.signed {
                seen.transactionId = t.transactionId
                seen.productId = t.productId
            }
            throw VaultFailure.verification(result.error ?? VerificationError(.malformed, "not a signed transaction"))
        }
        guard case .transaction(let t) = evidence.signed else {
            throw VaultFailure(.unsupportedFormat, "only signed transactions can be redeemed, not \(evidence.kind?.rawValue ?? "this")")
        }
        seen.transactionId = t.transactionId
        seen.productId = t.productId
        guard let transactionId = t.transactionId, let productId = t.productId, let bundleId = t.bundleId else {
            throw VaultFailure.incomplete("the transaction lacks a transaction id, product id or bundle id")
        }
        return Purchase(
            transactionId: transactionId, originalTransactionId: t.originalTransactionId, productId: productId, bundleId: bundleId,
            environment: environment, purchaseDate: t.purchaseDate?.date, quantity: try Self.quantity(t.quantity.map(Int64.init)),
            revokedAt: t.revocationDate?.date,
            format: .signedTransaction, appAccountToken: t.appAccountToken, storeKitType: t.productType, expiresDate: t.expiresDate?.date,
            ownershipType: t.inAppOwnershipType, isUpgraded: t.isUpgraded ?? false)
    }

    /// A purchase's quantity (absent: 1) as every ledger stores it: 1 through 2³¹ − 1
    /// (PostgreSQL's integer; Apple sells at most 10 of a consumable at once). Anything else
    /// is unusable, 422, and never reaches a ledger, whose chain hashes the value as given.
    static func quantity(_ value: Int64?) throws(VaultFailure) -> Int {
        let quantity = value ?? 1
        guard quantity >= 1, quantity <= Int64(Int32.max) else {
            throw VaultFailure.incomplete("the purchase's quantity \(quantity) is outside 1–\(Int32.max)")
        }
        return Int(quantity)
    }

    /// Runs a storage call, turning its failure into a 503-class ``VaultFailure``.
    func storage<T>(_ body: () async throws -> T) async throws(VaultFailure) -> T {
        do { return try await body() } catch { throw VaultFailure(.storageUnavailable, "storage failed: \(error)") }
    }

    /// A random (version 4) UUID, lowercased: a redemption's id. Drawn from
    /// `SystemRandomNumberGenerator` (two 8-byte `getrandom` calls): Foundation's `UUID()` on
    /// Linux opens, reads and closes `/dev/urandom` on every call — 2% of the server's samples
    /// in a profile of the paced PostgreSQL load (2026-11-27), a saving below that machine's
    /// noise in CPU per request (Benchmarks/README.md).
    static func randomRedemptionId() -> String {
        var rng = SystemRandomNumberGenerator()
        let high = rng.next() as UInt64
        let low = rng.next() as UInt64
        return UUID.version4(high: high, low: low).uuidString.lowercased()
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
