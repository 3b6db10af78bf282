import Foundation

/// What happened to a purchase after it was redeemed (or refunded): a restore, a renewal, a
/// subscription status notification, a refund reversed or declined. Appended to the ledger as
/// its own chained event; the redemption row is never edited. An entitlement's state is the
/// fold of its redemption, its revocation and these events (``Entitlement``).
public struct PurchaseEvent: Codable, Sendable, Hashable {
    public enum Kind: String, Codable, Sendable, Hashable, CaseIterable {
        /// The owner presented a purchase already theirs (a new device): fresh tokens.
        case restore
        /// A newer transaction of a subscription (a renewal) was presented: extends it.
        case renewal
        /// A subscription notification: SUBSCRIBED, DID_RENEW, DID_FAIL_TO_RENEW,
        /// GRACE_PERIOD_EXPIRED, EXPIRED, DID_CHANGE_RENEWAL_STATUS (type/subtype in `detail`).
        case subscriptionStatus
        /// REFUND_REVERSED: a revoked purchase entitles again (a chained un-revoke).
        case refundReversed
        /// REFUND_DECLINED: recorded, changes nothing.
        case refundDeclined
        /// A partial refund the refund policy keeps (recorded, the purchase still entitles).
        case partialRefund
        /// A refund after a reversal: the purchase is revoked again.
        case revokedAgain
        /// A notification that matched nothing to change (a reversal of a purchase that is not
        /// revoked): recorded for the audit, ignored by the fold.
        case recordedOnly
    }

    public enum Source: String, Codable, Sendable, Hashable {
        /// A verified App Store Server Notification.
        case notification
        /// A player's (or a grant holder's) request with a verified proof.
        case client
        /// An admin, through the API.
        case admin
    }

    public var sequence: Int64
    public var at: Date
    /// A ``Kind`` raw value (stored and hashed as text; see ``knownKind``).
    public var kind: String
    public var environment: String
    /// The purchase's replay key (see ``Redemption/replayKey``).
    public var replayKey: String
    /// The redemption of the purchase; empty when it was not redeemed here.
    public var redemptionId: String
    /// The transaction the event is about (a renewal's new transaction id).
    public var transactionId: String
    public var playerId: String?
    /// A subscription's new end (`expiresDate`), when the event carries one.
    public var expiresAt: Date?
    /// The end of a grace period (`gracePeriodExpiresDate`); an event that ends the grace
    /// period (GRACE_PERIOD_EXPIRED, EXPIRED) records its own time.
    public var graceUntil: Date?
    /// The notification type/subtype, refund details; escaped, at most 512 bytes.
    public var detail: String
    public var source: Source
    /// The notification UUID, or the redemption id of a client event.
    public var reference: String

    public init(
        sequence: Int64 = 0, at: Date, kind: Kind, environment: String, replayKey: String, redemptionId: String, transactionId: String,
        playerId: String? = nil, expiresAt: Date? = nil, graceUntil: Date? = nil, detail: String, source: Source, reference: String
    ) {
        self.init(
            sequence: sequence, at: at, kind: kind.rawValue, environment: environment, replayKey: replayKey, redemptionId: redemptionId,
            transactionId: transactionId, playerId: playerId, expiresAt: expiresAt, graceUntil: graceUntil, detail: detail, source: source,
            reference: reference)
    }

    public init(
        sequence: Int64, at: Date, kind: String, environment: String, replayKey: String, redemptionId: String, transactionId: String,
        playerId: String?, expiresAt: Date?, graceUntil: Date?, detail: String, source: Source, reference: String
    ) {
        self.sequence = sequence
        self.at = at
        self.kind = kind
        self.environment = environment
        self.replayKey = replayKey
        self.redemptionId = redemptionId
        self.transactionId = transactionId
        self.playerId = playerId
        self.expiresAt = expiresAt
        self.graceUntil = graceUntil
        self.detail = detail
        self.source = source
        self.reference = reference
    }

    /// The kind, typed; nil for text this build does not know.
    public var knownKind: Kind? { Kind(rawValue: kind) }
}

/// The outcome of appending a purchase event.
public enum PurchaseEventOutcome: Sendable, Hashable {
    case appended(PurchaseEvent)
    /// A notification's event is already in the ledger (Apple retries notifications).
    case duplicate
}

/// A purchase's entitlement now: the fold of its redemption, its revocation and its events.
public struct Entitlement: Sendable, Hashable {
    public enum State: String, Sendable, Hashable, Codable {
        case active
        /// A subscription past its end (and grace period).
        case expired
        /// Refunded or revoked (and not reversed).
        case revoked
    }

    public var redemption: Redemption
    public var state: State
    /// When it stops entitling (nil: never, unless revoked).
    public var endsAt: Date?
    /// Inside a billing grace period.
    public var inGracePeriod: Bool

    /// Folds what the ledger holds of one purchase at `now`. Subscriptions end at the latest
    /// `expiresDate` seen, or later while the most recent grace period runs. A revocation holds
    /// unless more reversals than re-revocations followed it and a reversal came last — or, for a subscription, a later
    /// period was paid for: after Apple's refund (not an admin's revocation or a REVOKE), a
    /// renewal (another transaction, ending after the refund) recorded after the last
    /// revocation entitles again until its own end. The vault records a renewal or status
    /// bought before the revocation as `recordedOnly` (``Vault``'s `periodKind`), so only a
    /// period paid after it counts.
    public static func fold(_ redemption: Redemption, revocation: Revocation?, events: [PurchaseEvent], now: Date) -> Entitlement {
        var latestExpiry = redemption.expiresAt
        var grace: Date?
        var tally = RevocationTally(revocations: revocation == nil ? 0 : 1)
        var lastRevocation = revocation.map {
            (
                at: $0.recordedAt, revokedAt: $0.revokedAt, transactionId: $0.transactionId,
                refund: isAppleRefund($0.reason, admin: $0.source == .admin)
            )
        }
        var paidAfterRevocation: Date?
        for event in events.sorted(by: { $0.sequence < $1.sequence }) {
            if let expires = event.expiresAt { latestExpiry = max(latestExpiry ?? expires, expires) }
            if let until = event.graceUntil { grace = until }
            switch event.knownKind {
            case .refundReversed: tally.add(.refundReversed)
            case .revokedAgain:
                tally.add(.revokedAgain)
                // Sticky: once an admin's revocation or a REVOKE is among them, no payment lifts it.
                lastRevocation = (
                    at: event.at, revokedAt: event.at, transactionId: event.transactionId,
                    refund: (lastRevocation?.refund ?? true) && isAppleRefund(event.detail, admin: event.source == .admin)
                )
                paidAfterRevocation = nil
            case .renewal, .subscriptionStatus:
                if let last = lastRevocation, last.refund, let expires = event.expiresAt, event.at >= last.at, expires > last.revokedAt,
                    event.transactionId != last.transactionId
                {
                    paidAfterRevocation = max(paidAfterRevocation ?? expires, expires)
                }
            default: break
            }
        }
        let ends: Date? = latestExpiry.map { expiry in max(expiry, grace ?? expiry) }
        let inGrace = latestExpiry.map { expiry in now >= expiry && (grace.map { now < $0 } ?? false) } ?? false
        let state: State
        // As the replay rule (``revocationHolds(afterEventKinds:)``): revoked unless the
        // reversals outnumber the revocations and came last.
        if tally.holds {
            if redemption.expiresAt != nil, let paid = paidAfterRevocation {
                state = now < max(paid, grace ?? paid) ? .active : .expired
            } else {
                state = .revoked
            }
        } else {
            state = ends.map { now < $0 ? .active : .expired } ?? .active
        }
        return Entitlement(redemption: redemption, state: state, endsAt: ends, inGracePeriod: inGrace)
    }
}

extension Entitlement {
    /// Whether a revocation (its reason or a `revokedAgain` event's detail, and its source) is
    /// Apple's refund: not an admin's revocation, not a REVOKE (family sharing ended). Only a
    /// refund is reversed by REFUND_REVERSED or lifted by a period paid after it.
    static func isAppleRefund(_ reason: String, admin: Bool) -> Bool {
        !admin && !reason.hasPrefix("REVOKE")
    }

    /// The kinds of event that decide whether a revocation holds (the stores read only these
    /// for the replay rule).
    public static let revocationKinds: [PurchaseEvent.Kind] = [.refundReversed, .revokedAgain]

    /// Whether a purchase's revocation holds after its events (their kinds, in chain order):
    /// unless more reversals (REFUND_REVERSED) than refunds again followed it, *and* the last
    /// of them was a reversal — either alone says revoked, so it fails closed whatever order
    /// Apple's notifications arrive in (a retried old reversal after a later refund; two
    /// reversals appended at once, then a refund). The replay rule's test for a revocation
    /// kept before the purchase was redeemed.
    public static func revocationHolds(afterEventKinds kinds: some Sequence<String>) -> Bool {
        var tally = RevocationTally(revocations: 1)
        for kind in kinds { tally.add(PurchaseEvent.Kind(rawValue: kind)) }
        return tally.holds
    }
}

/// A purchase's revocations and reversals, in chain order: the one rule the entitlement fold
/// and the replay rule share.
struct RevocationTally {
    var revocations: Int
    var reversals = 0
    var lastIsReversal = false

    mutating func add(_ kind: PurchaseEvent.Kind?) {
        switch kind {
        case .refundReversed:
            reversals += 1
            lastIsReversal = true
        case .revokedAgain:
            revocations += 1
            lastIsReversal = false
        default: break
        }
    }

    /// Revoked unless the reversals outnumber the revocations and a reversal came last.
    var holds: Bool { revocations > 0 && (revocations > reversals || !lastIsReversal) }
}

/// What Coffer served of one asset version for one redemption: the evidence a refund dispute
/// or Apple's consumption request needs. Kept per (redemption, asset, digest), updated as
/// downloads finish (not chained: it is counted, not appended).
public struct Delivery: Codable, Sendable, Hashable {
    public var sequence: Int64
    public var redemptionId: String
    public var assetId: String
    public var sha256: String
    public var firstAt: Date
    public var lastAt: Date
    /// Downloads started (GET answered with a body, a redirect or a hand-off).
    public var downloads: Int64
    /// Downloads whose every requested byte was sent (or handed off).
    public var completed: Int64
    /// Bytes Coffer itself sent (0 for redirects and hand-offs, which the store or nginx serve).
    public var bytesServed: Int64
    /// Whether the whole object was delivered at least once (a complete full-length download,
    /// or a hand-off of the full object).
    public var complete: Bool

    public init(
        sequence: Int64 = 0, redemptionId: String, assetId: String, sha256: String, firstAt: Date, lastAt: Date, downloads: Int64,
        completed: Int64, bytesServed: Int64, complete: Bool
    ) {
        self.sequence = sequence
        self.redemptionId = redemptionId
        self.assetId = assetId
        self.sha256 = sha256
        self.firstAt = firstAt
        self.lastAt = lastAt
        self.downloads = downloads
        self.completed = completed
        self.bytesServed = bytesServed
        self.complete = complete
    }

    /// Merges a later report of the same redemption, asset and digest.
    public mutating func merge(_ later: Delivery) {
        firstAt = min(firstAt, later.firstAt)
        lastAt = max(lastAt, later.lastAt)
        downloads += later.downloads
        completed += later.completed
        bytesServed += later.bytesServed
        complete = complete || later.complete
    }
}

/// Delivery evidence: recorded in batches, read by auditors.
public protocol DeliveryRepository: Sendable {
    /// Adds each report to its (redemption, asset, digest) row, creating it when new.
    func record(_ reports: [Delivery]) async throws
    /// Rows in order of first delivery (`sequence > after`), of one redemption when given.
    func deliveries(redemptionId: String?, after: Int64, limit: Int) async throws -> [Delivery]
}
