import CofferCore
import Foundation

/// In-memory ledger with the same uniqueness rule as the SQLite schema.
public actor InMemoryLedger: LedgerRepository {
    private var rows: [Redemption] = []
    /// Row index by "environment / replay key".
    private var byKey: [String: Int] = [:]
    private var attemptRows: [RejectedAttempt] = []

    public init() {}

    static func key(_ environment: String?, _ replayKey: String) -> String { "\(environment ?? "")\u{0}\(replayKey)" }

    public func insert(_ redemption: Redemption, refusals: InsertRefusals?) -> LedgerInsertOutcome {
        let key = Self.key(redemption.environment, redemption.effectiveReplayKey)
        if let revoked = revocationRows.first(where: { Self.key($0.environment, $0.replayKey ?? $0.transactionId) == key }) {
            if let refusals { record(refusals.revoked) }
            return .revoked(revoked)
        }
        guard byKey[key] == nil else {
            if let refusals { record(refusals.replay) }
            return .alreadyRedeemed
        }
        var row = redemption
        row.sequence = Int64(rows.count + 1)
        byKey[key] = rows.count
        rows.append(row)
        return .inserted(row)
    }

    public func record(_ attempt: RejectedAttempt) {
        var row = attempt
        row.sequence = Int64(attemptRows.count + 1)
        attemptRows.append(row)
    }

    public func redemption(grantHash: String) -> Redemption? { rows.first { $0.grantHash == grantHash } }

    private var revocationRows: [Revocation] = []

    public func revoke(_ revocation: Revocation, keepUnredeemed: Bool) -> RevocationOutcome {
        let key = Self.key(revocation.environment, revocation.replayKey ?? revocation.transactionId)
        guard !revocationRows.contains(where: { Self.key($0.environment, $0.replayKey ?? $0.transactionId) == key }) else { return .alreadyRevoked }
        var row = revocation
        row.sequence = Int64(revocationRows.count + 1)
        guard let index = byKey[key] else {
            guard keepUnredeemed else { return .notRedeemed }
            row.redemptionId = ""
            revocationRows.append(row)
            return .recordedUnredeemed(row)
        }
        row.redemptionId = rows[index].redemptionId
        revocationRows.append(row)
        return .revoked(row)
    }

    public func revocation(of redemption: Redemption) -> Revocation? {
        let key = Self.key(redemption.environment, redemption.effectiveReplayKey)
        return revocationRows.first {
            $0.redemptionId == redemption.redemptionId || Self.key($0.environment, $0.replayKey ?? $0.transactionId) == key
        }
    }

    public func revocations(after: Int64, limit: Int) -> [Revocation] {
        Array(revocationRows.lazy.filter { $0.sequence > after }.prefix(max(0, limit)))
    }

    public func redemptions(_ f: AuditFilter) -> [Redemption] {
        Array(
            rows.lazy.filter { r in
                r.sequence > f.after && (f.transactionId.map { $0 == r.transactionId } ?? true)
                    && (f.originalTransactionId.map { $0 == r.originalTransactionId } ?? true)
                    && (f.productId.map { $0 == r.productId } ?? true) && (f.bundleId.map { $0 == r.bundleId } ?? true)
                    && (f.from.map { r.redeemedAt >= $0 } ?? true) && (f.to.map { r.redeemedAt < $0 } ?? true)
            }
            .prefix(f.limit))
    }

    public func attempts(_ f: AuditFilter) -> [RejectedAttempt] {
        Array(
            attemptRows.lazy.filter { a in
                a.sequence > f.after && (f.transactionId.map { $0 == a.transactionId } ?? true)
                    && (f.productId.map { $0 == a.productId } ?? true) && (f.code.map { $0 == a.code } ?? true)
                    && (f.from.map { a.at >= $0 } ?? true) && (f.to.map { a.at < $0 } ?? true)
            }
            .prefix(f.limit))
    }
}
