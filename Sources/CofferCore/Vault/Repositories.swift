import Foundation

/// Products and assets. Implementations: ``InMemoryCatalogue`` (tests), SQLite (CofferStore).
public protocol CatalogueRepository: Sendable {
    func putProduct(_ product: Product) async throws
    func product(_ productId: String) async throws -> Product?
    func products() async throws -> [Product]
    /// Returns whether a product was deleted.
    func deleteProduct(_ productId: String) async throws -> Bool
    /// Stores a new version of an asset (version = latest + 1) and returns it.
    func addAssetVersion(assetId: String, name: String, contentType: String, size: Int64, sha256: String, at: Date) async throws -> Asset
    /// The latest version of an asset.
    func asset(_ assetId: String) async throws -> Asset?
    /// Latest versions of all assets.
    func assets() async throws -> [Asset]
}

/// The attempts a ledger records in the same write as a refused insert.
public struct InsertRefusals: Sendable, Hashable {
    /// Recorded when the insert is a replay (`.alreadyRedeemed`).
    public var replay: RejectedAttempt
    /// Recorded when a kept revocation refuses it (`.revoked`).
    public var revoked: RejectedAttempt

    public init(replay: RejectedAttempt, revoked: RejectedAttempt) {
        self.replay = replay
        self.revoked = revoked
    }
}

/// The replay ledger: one row per redeemed purchase, the rejected attempts and the revocations.
///
/// The replay rule: within one environment, at most one redemption per replay key
/// (``Redemption/effectiveReplayKey``); and none for a purchase revoked before it was redeemed.
public protocol LedgerRepository: Sendable {
    /// Inserts a redemption; `.alreadyRedeemed` when its environment and replay key are already
    /// in the ledger, `.revoked` when a kept revocation matches them; the matching attempt of
    /// `refusals` (if given) is then recorded in the same write. Returns only once durable.
    func insert(_ redemption: Redemption, refusals: InsertRefusals?) async throws -> LedgerInsertOutcome
    func record(_ attempt: RejectedAttempt) async throws
    func redemption(grantHash: String) async throws -> Redemption?
    func redemptions(_ filter: AuditFilter) async throws -> [Redemption]
    func attempts(_ filter: AuditFilter) async throws -> [RejectedAttempt]
    /// Appends a revocation of the purchase `revocation.environment` / `revocation.replayKey`
    /// (both required). When it was redeemed, `redemptionId` is filled in from the ledger;
    /// when not, it is kept (`recordedUnredeemed`) if `keepUnredeemed`, else `notRedeemed`.
    /// At most one revocation per environment and replay key.
    func revoke(_ revocation: Revocation, keepUnredeemed: Bool) async throws -> RevocationOutcome
    /// The revocation of a redemption (by its id, or by its environment and replay key), if any.
    func revocation(of redemption: Redemption) async throws -> Revocation?
    /// Revocations after `after`, oldest first.
    func revocations(after: Int64, limit: Int) async throws -> [Revocation]
}

extension LedgerRepository {
    /// Inserts a redemption, recording nothing when it is refused.
    public func insert(_ redemption: Redemption) async throws -> LedgerInsertOutcome { try await insert(redemption, refusals: nil) }
}

/// Admin and auditor keys, stored hashed.
public protocol KeyRepository: Sendable {
    func create(_ key: APIKey) async throws
    func key(secretHash: String) async throws -> APIKey?
    /// Returns whether a live key was revoked.
    func revoke(keyId: String, at: Date) async throws -> Bool
}

/// In-memory catalogue: a test double and the reference behaviour for other stores.
public actor InMemoryCatalogue: CatalogueRepository {
    private var productsById: [String: Product] = [:]
    private var assetVersions: [String: [Asset]] = [:]

    public init() {}

    public func putProduct(_ product: Product) { productsById[product.productId] = product }
    public func product(_ productId: String) -> Product? { productsById[productId] }
    public func products() -> [Product] { productsById.values.sorted { $0.productId < $1.productId } }
    public func deleteProduct(_ productId: String) -> Bool { productsById.removeValue(forKey: productId) != nil }

    public func addAssetVersion(assetId: String, name: String, contentType: String, size: Int64, sha256: String, at: Date) -> Asset {
        let version = (assetVersions[assetId]?.last?.version ?? 0) + 1
        let asset = Asset(assetId: assetId, version: version, name: name, contentType: contentType, size: size, sha256: sha256, createdAt: at)
        assetVersions[assetId, default: []].append(asset)
        return asset
    }

    public func asset(_ assetId: String) -> Asset? { assetVersions[assetId]?.last }
    public func assets() -> [Asset] { assetVersions.values.compactMap(\.last).sorted { $0.assetId < $1.assetId } }
}

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

/// In-memory key store.
public actor InMemoryKeys: KeyRepository {
    private var keys: [String: APIKey] = [:]

    public init() {}

    public func create(_ key: APIKey) { keys[key.keyId] = key }
    public func key(secretHash: String) -> APIKey? { keys.values.first { $0.secretHash == secretHash } }
    public func revoke(keyId: String, at: Date) -> Bool {
        guard var key = keys[keyId], key.revokedAt == nil else { return false }
        key.revokedAt = at
        keys[keyId] = key
        return true
    }
}

/// The admin audit log: append-only.
public protocol AdminLogRepository: Sendable {
    func record(_ action: AdminAction) async throws
    /// Actions after `after` (a sequence cursor), oldest first, at most `limit`.
    func actions(after: Int64, limit: Int) async throws -> [AdminAction]
}

/// In-memory admin log.
public actor InMemoryAdminLog: AdminLogRepository {
    private var rows: [AdminAction] = []

    public init() {}

    public func record(_ action: AdminAction) {
        var row = action
        row.sequence = Int64(rows.count + 1)
        rows.append(row)
    }

    public func actions(after: Int64, limit: Int) -> [AdminAction] {
        Array(rows.lazy.filter { $0.sequence > after }.prefix(max(0, limit)))
    }
}
