import CofferCore
import Foundation

// The lookups of the replay rule, as the SQLite ledger makes them (`ChainStore` in
// CofferStore): a purchase is an environment and a replay key; rows from before replay keys
// (`replayKey` nil) are keyed by their transaction id, and also match by original transaction
// id; revocations from before then carry no environment or key but name their redemption.
extension InMemoryLedger {
    /// Whether `row` is a redemption of the purchase `environment` / `replayKey`.
    func isPurchase(_ row: Redemption, environment: String, replayKey: String) -> Bool {
        guard row.environment.sameBytes(environment) else { return false }
        if row.effectiveReplayKey.sameBytes(replayKey) { return true }
        return row.replayKey == nil && row.originalTransactionId?.sameBytes(replayKey) == true
    }

    func isRedeemed(environment: String, replayKey: String) -> Bool {
        redemptionRows.contains { isPurchase($0, environment: environment, replayKey: replayKey) }
    }

    /// The ids of the redemptions of a purchase, oldest first.
    func redemptionIds(environment: String, replayKey: String) -> [String] {
        redemptionRows.filter { isPurchase($0, environment: environment, replayKey: replayKey) }.map(\.redemptionId)
    }

    /// The revocation stored with this environment and replay key.
    func keyedRevocation(environment: String?, replayKey: String) -> Revocation? {
        revocationRows.first {
            ($0.environment ?? "").sameBytes(environment ?? "") && ($0.replayKey ?? $0.transactionId).sameBytes(replayKey)
        }
    }

    /// The revocation of a purchase: keyed, or an older one naming one of its redemptions.
    public func revocation(environment: String, replayKey: String) -> Revocation? {
        revocation(environment: Optional(environment), replayKey: replayKey)
    }

    func revocation(environment: String?, replayKey: String) -> Revocation? {
        if let keyed = keyedRevocation(environment: environment, replayKey: replayKey) { return keyed }
        let ids = redemptionIds(environment: environment ?? "", replayKey: replayKey)
        return revocationRows.first { row in row.environment == nil && ids.contains { $0.sameBytes(row.redemptionId) } }
    }
}
