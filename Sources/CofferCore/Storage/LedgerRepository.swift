import Foundation

/// The replay ledger: one row per redeemed purchase, the rejected attempts and the revocations.
///
/// The replay rule: within one environment, at most one redemption per replay key
/// (``Redemption/effectiveReplayKey``); and none for a purchase revoked before it was redeemed,
/// unless the revocation was reversed since (``Entitlement/revocationHolds(afterEventKinds:)``:
/// a chained REFUND_REVERSED of the purchase, not followed by a refund again).
public protocol LedgerRepository: Sendable {
    /// Inserts a redemption; `.alreadyRedeemed` when its environment and replay key are already
    /// in the ledger, `.revoked` when a kept revocation matches them and still holds; the matching attempt of
    /// `refusals` (if given) is then recorded in the same write. Returns only once durable.
    func insert(_ redemption: Redemption, refusals: InsertRefusals?) async throws -> LedgerInsertOutcome
    func record(_ attempt: RejectedAttempt) async throws
    func redemption(grantHash: String) async throws -> Redemption?
    func redemptions(_ filter: AuditFilter) async throws -> [Redemption]
    func attempts(_ filter: AuditFilter) async throws -> [RejectedAttempt]
    /// Redemptions and refused attempts per UTC hour, `from` inclusive to `to` exclusive: only
    /// hours with activity, oldest first (an indexed range on each table's time column).
    func hourlyCounts(from: Date, to: Date) async throws -> [HourlyCount]
    /// Appends a revocation of the purchase `revocation.environment` / `revocation.replayKey`
    /// (both required). When it was redeemed, `redemptionId` is filled in from the ledger;
    /// when not, it is kept (`recordedUnredeemed`) if `keepUnredeemed`, else `notRedeemed`.
    /// At most one revocation per environment and replay key. `logging` (an admin's revocation)
    /// is recorded in the admin log in the same transaction when a revocation is stored.
    func revoke(_ revocation: Revocation, keepUnredeemed: Bool, logging: AdminAction?) async throws -> RevocationOutcome
    /// The revocation of a redemption (by its id, or by its environment and replay key), if any.
    func revocation(of redemption: Redemption) async throws -> Revocation?
    /// The revocation of a purchase, redeemed or not (by its environment and replay key, or —
    /// from before the revocations were keyed — naming one of its redemptions), if any.
    func revocation(environment: String, replayKey: String) async throws -> Revocation?
    /// Revocations after `after`, oldest first.
    func revocations(after: Int64, limit: Int) async throws -> [Revocation]
    /// The chained redemption of a purchase (its environment and replay key), if any.
    func redemption(environment: String, replayKey: String) async throws -> Redemption?
    /// Appends a purchase event to the chain. A notification's event whose `reference` (the
    /// notification UUID) is already in the ledger is `.duplicate`: Apple retries notifications.
    /// `logging` (an admin's action) is recorded in the admin log in the same transaction when
    /// the event is appended.
    func append(_ event: PurchaseEvent, logging: AdminAction?) async throws -> PurchaseEventOutcome
    /// The chained events of one purchase, oldest first (rows no chain event covers are left out).
    func purchaseEvents(environment: String, replayKey: String) async throws -> [PurchaseEvent]
    /// Events after `after`, oldest first.
    func purchaseEvents(after: Int64, limit: Int) async throws -> [PurchaseEvent]
    /// Returns once everything committed so far is durable (flushed, and on a synchronous
    /// standby where one is required). Nothing to do where a commit is durable when it returns.
    func ensureDurable() async throws
}

extension LedgerRepository {
    /// SQLite (`synchronous=FULL`) and memory: a commit is as durable as it gets when it returns.
    public func ensureDurable() async throws {}

    /// Inserts a redemption, recording nothing when it is refused.
    public func insert(_ redemption: Redemption) async throws -> LedgerInsertOutcome { try await insert(redemption, refusals: nil) }

    /// Appends a revocation, logging nothing in the admin log (Apple's notifications, tools).
    public func revoke(_ revocation: Revocation, keepUnredeemed: Bool) async throws -> RevocationOutcome {
        try await revoke(revocation, keepUnredeemed: keepUnredeemed, logging: nil)
    }

    /// Appends a purchase event, logging nothing in the admin log.
    public func append(_ event: PurchaseEvent) async throws -> PurchaseEventOutcome { try await append(event, logging: nil) }
}
