import Foundation
import Synchronization

/// Redemptions this instance answered 503 because their write's outcome could not be known
/// (``LedgerWriteInDoubt``), with their grants: the grant is random and only its hash is
/// stored, so without this a redemption that did commit could never be handed out — its
/// player's retry got 409 and the content they paid for was lost (a consumable's for good).
///
/// The first retry of the same purchase within the token lifetime gets the kept redemption —
/// once, only if the ledger holds it durably (the write did commit), and only to the same
/// requester: its player when it was bound to one, else a request with the same proof from the
/// same client address (a receipt leaked later is not enough). A retry before the earlier
/// write can have settled (``settle``) while the ledger does not show it gets a 503 again:
/// that write may still commit. Kept in memory, by this instance only (a retry through
/// another instance gets a 409, as before), at most ``capacity`` at a time.
final class InDoubtRedemptions: Sendable {
    struct Kept: Sendable {
        var redemption: Redemption
        var grant: String
        var since: Date
        var until: Date
    }

    /// What a retry finds.
    enum Resolution {
        /// Nothing kept for it (or dropped: expired, not committed, lost to another).
        case none
        /// The kept redemption, taken.
        case handOut(Kept)
        /// Kept, not in the ledger yet, and the earlier write may still commit: 503 again.
        case unsettled
    }

    static let capacity = 10_000
    /// How long an unanswered write may still commit: a statement's timeout (15 s) and the
    /// wait for the chain's lock before it, with room.
    static let settle: TimeInterval = 30
    private let kept = Mutex<[[UInt8]: Kept]>([:])

    private static func key(_ environment: String, _ replayKey: String) -> [UInt8] {
        Array(environment.utf8) + [0] + Array(replayKey.utf8)
    }

    /// Keeps `redemption` and its grant until `until` — unless one is kept for the purchase
    /// already, or it is full of unexpired ones.
    func keep(_ redemption: Redemption, grant: String, until: Date, now: Date) {
        kept.withLock { kept in
            let key = Self.key(redemption.environment, redemption.effectiveReplayKey)
            if let earlier = kept[key], earlier.until > now { return }
            if kept.count >= Self.capacity { kept = kept.filter { $0.value.until > now } }
            guard kept.count < Self.capacity else { return }
            kept[key] = Kept(redemption: redemption, grant: grant, since: now, until: until)
        }
    }

    /// Whether a redemption of this purchase is kept (and unexpired): one dictionary lookup, so
    /// the ledger is read only then.
    func holds(environment: String, replayKey: String, now: Date) -> Bool {
        kept.withLock { $0[Self.key(environment, replayKey)].map { $0.until > now } ?? false }
    }

    /// The kept redemption if `stored` (the ledger's redemption of the purchase, nil when it
    /// holds none) is it and the retry is its requester's: taken, so it is handed out once.
    func take(
        environment: String, replayKey: String, stored: Redemption?, player: Player?, proofHash: String, clientAddress: String, now: Date
    ) -> Resolution {
        kept.withLock { kept in
            let key = Self.key(environment, replayKey)
            guard let entry = kept[key] else { return .none }
            guard entry.until > now else {
                kept[key] = nil
                return .none
            }
            guard let stored else {
                if now.timeIntervalSince(entry.since) < Self.settle { return .unsettled }
                kept[key] = nil
                return .none
            }
            guard stored.redemptionId.utf8.elementsEqual(entry.redemption.redemptionId.utf8) else {
                kept[key] = nil
                return .none
            }
            if let owner = stored.playerId {
                guard player?.id.utf8.elementsEqual(owner.utf8) == true else { return .none }
            } else {
                guard proofHash.utf8.elementsEqual(entry.redemption.receiptSHA256.utf8),
                    clientAddress.utf8.elementsEqual(entry.redemption.clientAddress.utf8)
                else { return .none }
            }
            kept[key] = nil
            return .handOut(entry)
        }
    }
}
