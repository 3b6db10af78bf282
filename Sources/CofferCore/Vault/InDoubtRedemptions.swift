import Foundation
import Synchronization

/// Redemptions this instance answered 503 because their write's outcome could not be known
/// (``LedgerWriteInDoubt``), with their grants: the grant is random and only its hash is
/// stored, so without this a redemption that did commit could never be handed out — its
/// player's retry got 409 and the content they paid for was lost (a consumable's for good).
///
/// The first retry of the same purchase within the token lifetime gets the kept redemption —
/// once, only if the ledger holds it (the write did commit), and only to its player when it
/// was bound to one. Anyone else who can present the purchase could have raced the first
/// request the same way: handing it to the first retry grants nothing that request could not
/// have won. Kept in memory, by this instance only (a retry through another instance gets a
/// 409, as before), at most ``capacity`` at a time.
final class InDoubtRedemptions: Sendable {
    struct Kept: Sendable {
        var redemption: Redemption
        var grant: String
        var until: Date
    }

    static let capacity = 10_000
    private let kept = Mutex<[[UInt8]: Kept]>([:])

    private static func key(_ environment: String, _ replayKey: String) -> [UInt8] {
        Array(environment.utf8) + [0] + Array(replayKey.utf8)
    }

    /// Keeps `redemption` and its grant until `until` (nothing when full of unexpired ones).
    func keep(_ redemption: Redemption, grant: String, until: Date, now: Date) {
        kept.withLock { kept in
            if kept.count >= Self.capacity { kept = kept.filter { $0.value.until > now } }
            guard kept.count < Self.capacity else { return }
            kept[Self.key(redemption.environment, redemption.effectiveReplayKey)] = Kept(redemption: redemption, grant: grant, until: until)
        }
    }

    /// Whether a redemption of this purchase is kept (and unexpired): one dictionary lookup, so
    /// the ledger is read only then.
    func holds(environment: String, replayKey: String, now: Date) -> Bool {
        kept.withLock { $0[Self.key(environment, replayKey)].map { $0.until > now } ?? false }
    }

    /// The kept redemption if `stored` (the ledger's redemption of the purchase, nil when it
    /// holds none) is it and `player` may have it; taken, so it is handed out once. One that
    /// expired, did not commit or lost to another is dropped; one bound to another player
    /// stays for its own.
    func take(environment: String, replayKey: String, stored: Redemption?, player: Player?, now: Date) -> Kept? {
        kept.withLock { kept in
            let key = Self.key(environment, replayKey)
            guard let entry = kept[key] else { return nil }
            guard entry.until > now, let stored, stored.redemptionId.utf8.elementsEqual(entry.redemption.redemptionId.utf8) else {
                kept[key] = nil
                return nil
            }
            if let owner = stored.playerId, player?.id.utf8.elementsEqual(owner.utf8) != true { return nil }
            kept[key] = nil
            return entry
        }
    }
}
