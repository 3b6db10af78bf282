import Foundation

extension Vault {
    /// What a notification did.
    public enum NotificationOutcome: String, Sendable {
        /// A redeemed purchase is now revoked.
        case revoked
        /// A refund or revocation of a purchase not redeemed here (yet): kept, so a later
        /// redemption of it is refused (410 `revoked`).
        case notRedeemed
        /// Already revoked (Apple retries notifications).
        case alreadyRevoked
        /// REFUND_REVERSED: a revoked purchase entitles again.
        case reinstated
        /// A subscription's state changed (renewed, billing retry, grace period, expired, …).
        case updated
        /// Recorded, changes nothing: REFUND_DECLINED, a partial refund the policy keeps, a
        /// reversal of a purchase that was not revoked.
        case recorded
        /// This notification is already in the ledger (Apple retries notifications).
        case duplicate
        /// A notification type that changes nothing here.
        case ignored
    }

    /// Notification types that take a purchase back (REVOKE is also how family sharing ends).
    static let revokingTypes: Set<String> = ["REFUND", "REVOKE"]
    /// Notification types that change a subscription's state.
    static let subscriptionTypes: Set<String> = [
        "SUBSCRIBED", "DID_RENEW", "DID_FAIL_TO_RENEW", "GRACE_PERIOD_EXPIRED", "EXPIRED", "DID_CHANGE_RENEWAL_STATUS",
    ]
    static let handledTypes = revokingTypes.union(subscriptionTypes).union(["REFUND_REVERSED", "REFUND_DECLINED"])

    /// Handles a verified App Store Server Notification V2 (`signedPayload`), in the
    /// notification's own environment, each outcome a chained ledger event:
    /// - REFUND, REVOKE: a revocation (a redeemed purchase's grant stops working, an unredeemed
    ///   one can no longer be redeemed); a prorated refund under ``RefundPolicy/revokeFullOnly``
    ///   is recorded instead; a refund after a reversal revokes again.
    /// - REFUND_REVERSED: a revoked purchase entitles again. REFUND_DECLINED: recorded.
    /// - SUBSCRIBED, DID_RENEW, DID_FAIL_TO_RENEW, GRACE_PERIOD_EXPIRED, EXPIRED,
    ///   DID_CHANGE_RENEWAL_STATUS: the subscription's end and grace period (for a product the
    ///   catalogue sells as `autoRenewable`; ignored otherwise).
    public func handleNotification(_ signedPayload: String, now: Date) async throws(VaultFailure) -> NotificationOutcome {
        let result = await verifier.verifySignedData(signedPayload, now: now)
        guard case .valid(let evidence) = result, let environment = evidence.environment else {
            throw VaultFailure.verification(result.error ?? VerificationError(.malformed, "not a notification"))
        }
        guard case .notification(let notification) = evidence.signed else {
            throw VaultFailure(.unsupportedFormat, "expected an App Store Server Notification V2 signedPayload")
        }
        guard let type = notification.notificationType, Self.handledTypes.contains(type) else { return .ignored }
        guard let transaction = notification.transaction, let transactionId = transaction.transactionId else {
            throw VaultFailure.incomplete("a \(type) notification without a signed transaction")
        }
        let original = transaction.originalTransactionId
        for value in [transactionId, original, transaction.productId, notification.notificationUUID].compactMap({ $0 })
        where !LedgerText.isIdentifier(value) {
            throw VaultFailure.incomplete("an identifier of the notification is empty, too long or holds control characters")
        }
        // The UUID is what makes a retried notification recognisable.
        guard let uuid = notification.notificationUUID else { throw VaultFailure.incomplete("a \(type) notification without a notificationUUID") }
        // The replay key depends on the product's type: the one Apple signed in the transaction,
        // as a redemption of it is keyed (a signed transaction must match the catalogue's type to
        // be redeemed) — not the catalogue's of the moment, which a refund arriving before the
        // product is catalogued, or after it was removed or retyped, would miss the redemption
        // by. Without a signed type, the catalogue's; without either, the transaction id (what
        // a consumable's would be).
        var catalogued: ProductType?
        if let id = transaction.productId { catalogued = try await storage({ try await catalogue.product(id) })?.type }
        // Subscription state only concerns the auto-renewable products this catalogue sells.
        if Self.subscriptionTypes.contains(type) && catalogued != .autoRenewable { return .ignored }
        let replayKey = Self.replayKey(
            type: transaction.productType.map(ProductType.init) ?? catalogued ?? .consumable, transactionId: transactionId, original: original,
            productId: transaction.productId ?? "")
        let reason = LedgerText.escaped([type, notification.subtype].compactMap { $0 }.joined(separator: "/"), maxBytes: 128)
        let context = NotificationContext(
            type: type, reason: reason, environment: environment.rawValue, replayKey: replayKey, transactionId: transactionId,
            reference: uuid, now: now)
        if Self.revokingTypes.contains(type) {
            return try await revoke(by: notification, transaction, context)
        }
        let existing = try await storage({ try await ledger.redemption(environment: context.environment, replayKey: replayKey) })
        switch type {
        case "REFUND_REVERSED":
            // Only a purchase that is revoked now is reinstated (a reversal of nothing is
            // recorded): a redeemed one by its entitlement, one not redeemed yet by its kept
            // revocation — reversed, it can be redeemed again.
            guard let existing else { return try await reverseKept(context, detail: reason) }
            // A REVOKE or an admin's revocation is not Apple's refund to reverse.
            let revocation = try await storage({ try await ledger.revocation(of: existing) })
            let events = try await storage({ try await ledger.purchaseEvents(environment: context.environment, replayKey: replayKey) })
            // The fold over what was just read (entitlement(of:) would read both again).
            let revoked = Entitlement.fold(existing, revocation: revocation, events: events, now: now).state == .revoked
            let reverses = revoked && Self.reversible(revocation, events)
            guard try await append(reverses ? .refundReversed : .recordedOnly, context, existing: existing, detail: reason) != .duplicate
            else { return .duplicate }
            // Counted; reinstated once the reversals outnumber the refunds.
            guard reverses else { return .recorded }
            return try await entitlement(of: existing, now: now).state != .revoked ? .reinstated : .recorded
        case "REFUND_DECLINED":
            return try await append(.refundDeclined, context, existing: existing, detail: reason) == .duplicate ? .duplicate : .recorded
        default:
            // Subscription state. An upgraded transaction's expiry says nothing of the new one's.
            let expires = transaction.isUpgraded == true ? nil : transaction.expiresDate?.date
            var grace: Date?
            switch type {
            case "DID_FAIL_TO_RENEW": grace = notification.renewalInfo?.gracePeriodExpiresDate?.date
            case "GRACE_PERIOD_EXPIRED", "EXPIRED": grace = notification.signedDate?.date ?? now
            default: break
            }
            var detail = reason
            if let status = notification.renewalInfo?.autoRenewStatus { detail += " autoRenewStatus=\(status)" }
            if notification.renewalInfo?.isInBillingRetryPeriod == true { detail += " billingRetry" }
            var kind = PurchaseEvent.Kind.subscriptionStatus
            if let existing {
                let events = try await storage({ try await ledger.purchaseEvents(environment: context.environment, replayKey: replayKey) })
                kind = try await periodKind(.subscriptionStatus, of: existing, purchasedAt: transaction.purchaseDate?.date, events: events, now: now)
            }
            let outcome = try await append(kind, context, existing: existing, detail: detail, expiresAt: expires, graceUntil: grace)
            return outcome == .duplicate ? .duplicate : kind == .recordedOnly ? .recorded : .updated
        }
    }

    /// What every event of one notification shares.
    struct NotificationContext {
        var type: String
        var reason: String
        var environment: String
        var replayKey: String
        var transactionId: String
        var reference: String
        var now: Date
    }

    private func append(
        _ kind: PurchaseEvent.Kind, _ context: NotificationContext, existing: Redemption?, detail: String, expiresAt: Date? = nil,
        graceUntil: Date? = nil
    ) async throws(VaultFailure) -> PurchaseEventOutcome {
        let event = PurchaseEvent(
            at: context.now, kind: kind, environment: context.environment, replayKey: context.replayKey, redemptionId: existing?.redemptionId ?? "",
            transactionId: context.transactionId, playerId: existing?.playerId, expiresAt: expiresAt, graceUntil: graceUntil, detail: detail,
            source: .notification, reference: context.reference)
        return try await storage({ try await ledger.append(event) })
    }

    /// REFUND and REVOKE: revoke, unless the refund policy keeps a prorated refund; a purchase
    /// revoked, then reinstated, is revoked again.
    private func revoke(
        by notification: SignedNotification, _ transaction: SignedTransaction, _ context: NotificationContext
    ) async throws(VaultFailure) -> NotificationOutcome {
        let existing = try await storage({ try await ledger.redemption(environment: context.environment, replayKey: context.replayKey) })
        var detail = context.reason
        if let type = transaction.revocationType { detail += " \(LedgerText.escaped(type, maxBytes: 32))" }
        // Thousandths of a percent, 0–100000; anything else is recorded as Apple sent it.
        if let share = transaction.revocationPercentage {
            detail += (0...100_000).contains(share) ? " \(share / 1000).\(String(format: "%03d", share % 1000))%" : " revocationPercentage=\(share)"
        }
        let prorated =
            transaction.revocationType == "REFUND_PRORATED" || (transaction.revocationPercentage.map { (1..<100_000).contains($0) } ?? false)
        if context.type == "REFUND", prorated, refundPolicy == .revokeFullOnly {
            return try await append(.partialRefund, context, existing: existing, detail: detail) == .duplicate ? .duplicate : .recorded
        }
        let revocation = Revocation(
            redemptionId: "", transactionId: context.transactionId, revokedAt: transaction.revocationDate?.date ?? context.now,
            reason: LedgerText.escaped(detail, maxBytes: 128), source: .notification, reference: context.reference, recordedAt: context.now,
            environment: context.environment, replayKey: context.replayKey)
        switch try await storage({ try await ledger.revoke(revocation, keepUnredeemed: true) }) {
        case .revoked: return .revoked
        case .recordedUnredeemed, .notRedeemed: return .notRedeemed
        case .alreadyRevoked:
            // A refund after a reversal revokes again — unless it is Apple retrying the refund that was reversed.
            guard let existing else { return try await revokeKeptAgain(context, detail: detail) }
            // Counted whether it is revoked now or was reinstated (a reversal that arrives, or
            // is retried, after it must not lift it) — unless it is Apple retrying the
            // revocation itself.
            guard try await storage({ try await ledger.revocation(of: existing) })?.reference != context.reference else { return .alreadyRevoked }
            let wasRevoked = try await entitlement(of: existing, now: context.now).state == .revoked
            guard try await append(.revokedAgain, context, existing: existing, detail: detail) != .duplicate else { return .duplicate }
            return wasRevoked ? .alreadyRevoked : .revoked
        }
    }

    /// The revocation kept for a purchase not redeemed yet, if any, and the kinds of the
    /// chained events of the purchase (chain order).
    private func kept(_ context: NotificationContext) async throws(VaultFailure) -> (revocation: Revocation, events: [PurchaseEvent])? {
        guard let revocation = try await storage({ try await ledger.revocation(environment: context.environment, replayKey: context.replayKey) })
        else { return nil }
        let events = try await storage({ try await ledger.purchaseEvents(environment: context.environment, replayKey: context.replayKey) })
        return (revocation, events)
    }

    /// REFUND_REVERSED of a purchase not redeemed yet: a chained `refundReversed` when its kept
    /// revocation holds (and is a refund: a REVOKE is not reversed) — counted by the replay
    /// rule (``Entitlement/revocationHolds(afterEventKinds:)``), which lets its redemption
    /// through once the reversals outnumber the refunds and came last. A reversal of nothing
    /// is recorded only: counted, one that arrives before its refund (or whose refund was
    /// never delivered) would lift a later refund.
    private func reverseKept(_ context: NotificationContext, detail: String) async throws(VaultFailure) -> NotificationOutcome {
        guard let (revocation, events) = try await kept(context), Self.reversible(revocation, events),
            Entitlement.revocationHolds(afterEventKinds: events.map(\.kind))
        else {
            return try await append(.recordedOnly, context, existing: nil, detail: detail) == .duplicate ? .duplicate : .recorded
        }
        guard try await append(.refundReversed, context, existing: nil, detail: detail) != .duplicate else { return .duplicate }
        return Entitlement.revocationHolds(afterEventKinds: events.map(\.kind) + [PurchaseEvent.Kind.refundReversed.rawValue])
            ? .recorded : .reinstated
    }

    /// Whether Apple's REFUND_REVERSED may lift a purchase's revocations: not when one of them
    /// is a REVOKE (family sharing ended) or an admin's.
    static func reversible(_ revocation: Revocation?, _ events: [PurchaseEvent]) -> Bool {
        let revocations =
            (revocation.map { [($0.reason, $0.source == .admin)] } ?? [])
            + events.filter { $0.knownKind == .revokedAgain }.map { ($0.detail, $0.source == .admin) }
        return revocations.allSatisfy { Entitlement.isAppleRefund($0.0, admin: $0.1) }
    }

    /// A REFUND or REVOKE of a purchase not redeemed yet whose revocation is already kept:
    /// unless it is Apple retrying that one, a chained `revokedAgain` — counted whether the
    /// revocation holds now or was reversed, so that a reversal that arrives (or is retried)
    /// after it cannot lift it.
    private func revokeKeptAgain(_ context: NotificationContext, detail: String) async throws(VaultFailure) -> NotificationOutcome {
        guard let (revocation, events) = try await kept(context), revocation.reference != context.reference else { return .alreadyRevoked }
        let held = Entitlement.revocationHolds(afterEventKinds: events.map(\.kind))
        guard try await append(.revokedAgain, context, existing: nil, detail: detail) != .duplicate else { return .duplicate }
        return held ? .alreadyRevoked : .notRedeemed
    }
}
