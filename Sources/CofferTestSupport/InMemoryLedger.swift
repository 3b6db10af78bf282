import CofferCore
import Foundation

/// The in-memory ledger: redemptions, attempts, revocations and the admin log, every row
/// chained in one hash chain (``InMemoryChain``) with checkpoints and a seal when it has a
/// signer. It behaves as the SQLite ledger does (the contract tests run both): the replay
/// rule per environment and replay key — also for rows from before replay keys, matched by
/// original transaction id —, kept revocations, unique redemption ids and grant hashes,
/// identifiers compared byte for byte.
///
/// Also the admin log (``AdminLogRepository``) and the audit side (``LedgerAuditRepository``):
/// pass the same instance for all three.
///
///     let ledger = InMemoryLedger(signer: LedgerSigner(privateKey: .init()), checkpointEvery: 10)
///     _ = try await ledger.insert(redemption)
public actor InMemoryLedger: LedgerRepository {
    var chain: InMemoryChain
    var redemptionRows: [Redemption] = []
    var attemptRows: [RejectedAttempt] = []
    var revocationRows: [Revocation] = []
    var adminRows: [AdminAction] = []
    var eventRows: [PurchaseEvent] = []
    var deliveryRows: [Delivery] = []
    /// While set, admin-log writes fail (``failAdminLogWrites(_:)``).
    var adminLogFails = false

    /// `signer` signs a checkpoint every `checkpointEvery` entries and the seal after every
    /// write; nil keeps the chain unsigned (like a SQLite ledger opened without a key).
    public init(signer: LedgerSigner? = nil, checkpointEvery: Int64 = 1000) {
        chain = InMemoryChain(signer: signer, every: checkpointEvery)
    }

    /// Runs a write between a seal check and a new seal, as the SQLite ledger's transactions do.
    func sealed<T>(now: Date, _ body: () throws -> T) throws -> T {
        try chain.checkSeal()
        let result = try body()
        try chain.sealHead(now: now)
        return result
    }

    public func insert(_ redemption: Redemption, refusals: InsertRefusals?) throws -> LedgerInsertOutcome {
        try sealed(now: redemption.redeemedAt) {
            let key = redemption.effectiveReplayKey
            if isRedeemed(environment: redemption.environment, replayKey: key) {
                if let refusals { try append(refusals.replay) }
                return .alreadyRedeemed
            }
            if let revocation = keyedRevocation(environment: redemption.environment, replayKey: key),
                Entitlement.revocationHolds(
                    afterEventKinds: purchaseEvents(environment: redemption.environment, replayKey: key).map(\.kind))
            {
                if let refusals { try append(refusals.revoked) }
                return .revoked(revocation)
            }
            if redemptionRows.contains(where: { $0.redemptionId.sameBytes(redemption.redemptionId) }) {
                throw InMemoryStorageError.duplicate("redemption id \(redemption.redemptionId)")
            }
            if redemptionRows.contains(where: { $0.grantHash.sameBytes(redemption.grantHash) }) {
                throw InMemoryStorageError.duplicate("grant hash \(redemption.grantHash)")
            }
            var row = redemption
            row.sequence = Int64(redemptionRows.count + 1)
            let stored = row
            try chain.append(now: redemption.redeemedAt) { .redemption(stored, sequence: $0) }
            redemptionRows.append(stored)
            return .inserted(stored)
        }
    }

    public func record(_ attempt: RejectedAttempt) throws {
        try sealed(now: attempt.at) { try append(attempt) }
    }

    /// Stores an attempt and chains it (inside a sealed write).
    private func append(_ attempt: RejectedAttempt) throws {
        var row = attempt
        row.sequence = Int64(attemptRows.count + 1)
        let stored = row
        try chain.append(now: attempt.at) { .attempt(stored, sequence: $0) }
        attemptRows.append(stored)
    }

    public func redemption(grantHash: String) -> Redemption? { redemptionRows.first { $0.grantHash.sameBytes(grantHash) } }

    public func revoke(_ revocation: Revocation, keepUnredeemed: Bool, logging: AdminAction?) throws -> RevocationOutcome {
        let key = revocation.replayKey ?? revocation.transactionId
        return try sealed(now: revocation.recordedAt) {
            if self.revocation(environment: revocation.environment, replayKey: key) != nil { return .alreadyRevoked }
            let redemptionId = redemptionIds(environment: revocation.environment ?? "", replayKey: key).first
            if redemptionId == nil && !keepUnredeemed { return .notRedeemed }
            if logging != nil { try checkAdminLogWritable() }
            var row = revocation
            row.redemptionId = redemptionId ?? ""
            row.sequence = Int64(revocationRows.count + 1)
            let stored = row
            try chain.append(now: revocation.recordedAt) { .revocation(stored, sequence: $0) }
            revocationRows.append(stored)
            if let logging { try appendAdminAction(logging) }
            return redemptionId == nil ? .recordedUnredeemed(stored) : .revoked(stored)
        }
    }

    public func revocation(of redemption: Redemption) -> Revocation? {
        revocationRows.first { $0.redemptionId.sameBytes(redemption.redemptionId) }
            ?? revocation(environment: redemption.environment, replayKey: redemption.effectiveReplayKey)
    }

    public func revocations(after: Int64, limit: Int) -> [Revocation] {
        Array(revocationRows.lazy.filter { $0.sequence > after }.prefix(max(0, limit)))
    }

    public func redemptions(_ f: AuditFilter) -> [Redemption] {
        Array(
            redemptionRows.lazy.filter { r in
                r.sequence > f.after && Self.matches(f.transactionId, r.transactionId)
                    && Self.matches(f.originalTransactionId, r.originalTransactionId)
                    && Self.matches(f.productId, r.productId) && Self.matches(f.bundleId, r.bundleId)
                    && Self.matches(f.playerId, r.playerId)
                    && (f.from.map { r.redeemedAt >= $0 } ?? true) && (f.to.map { r.redeemedAt < $0 } ?? true)
            }
            .prefix(max(0, f.limit)))
    }

    public func hourlyCounts(from: Date, to: Date) -> [HourlyCount] {
        HourlyCount.merge(
            redemptions: redemptionRows.filter { $0.redeemedAt >= from && $0.redeemedAt < to }.map { (HourlyCount.hourNumber($0.redeemedAt), 1) },
            refused: attemptRows.filter { $0.at >= from && $0.at < to }.map { (HourlyCount.hourNumber($0.at), 1) })
    }

    public func attempts(_ f: AuditFilter) -> [RejectedAttempt] {
        Array(
            attemptRows.lazy.filter { a in
                a.sequence > f.after && Self.matches(f.transactionId, a.transactionId) && Self.matches(f.productId, a.productId)
                    && Self.matches(f.code, a.code) && (f.from.map { a.at >= $0 } ?? true) && (f.to.map { a.at < $0 } ?? true)
            }
            .prefix(max(0, f.limit)))
    }

    /// As SQLite and PostgreSQL answer: the row keyed so, else one from before migration 0003
    /// (no replay key) whose original transaction id is the key.
    public func redemption(environment: String, replayKey: String) -> Redemption? {
        redemptionRows.first { $0.environment.sameBytes(environment) && $0.effectiveReplayKey.sameBytes(replayKey) }
            ?? redemptionRows.first { isPurchase($0, environment: environment, replayKey: replayKey) }
    }

    public func append(_ event: PurchaseEvent, logging: AdminAction?) throws -> PurchaseEventOutcome {
        if event.source == .notification, eventRows.contains(where: { $0.source == .notification && $0.reference.sameBytes(event.reference) }) {
            return .duplicate
        }
        return try sealed(now: event.at) {
            if logging != nil { try checkAdminLogWritable() }
            var row = PurchaseEvent.escapedForLedger(event)
            row.sequence = Int64(eventRows.count + 1)
            let stored = row
            try chain.append(now: event.at) { .purchaseEvent(stored, sequence: $0) }
            eventRows.append(stored)
            if let logging { try appendAdminAction(logging) }
            return .appended(stored)
        }
    }

    public func purchaseEvents(environment: String, replayKey: String) -> [PurchaseEvent] {
        eventRows.filter { $0.environment.sameBytes(environment) && $0.replayKey.sameBytes(replayKey) }
    }

    public func purchaseEvents(after: Int64, limit: Int) -> [PurchaseEvent] {
        Array(eventRows.lazy.filter { $0.sequence > after }.prefix(max(0, limit)))
    }

    /// An unset filter field matches everything; a set one only the same bytes.
    private static func matches(_ wanted: String?, _ value: String?) -> Bool {
        guard let wanted else { return true }
        return value?.sameBytes(wanted) == true
    }
}
