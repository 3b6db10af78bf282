import Foundation

/// A player's purchase as `GET /v1/entitlements` lists it: its state and, while it entitles,
/// fresh tokens.
public struct OwnedEntitlement: Sendable {
    public var entitlement: Entitlement
    public var assets: [IssuedAsset]
}

extension Vault {
    /// The most entitlements one listing returns (a player with more is told to page).
    public static let maxEntitlements = 500

    /// A redemption's entitlement now, from its revocation and events.
    func entitlement(of redemption: Redemption, events: [PurchaseEvent]? = nil, now: Date) async throws(VaultFailure) -> Entitlement {
        let revocation = try await storage({ try await ledger.revocation(of: redemption) })
        var history = events ?? []
        if events == nil {
            history = try await storage({
                try await ledger.purchaseEvents(environment: redemption.environment, replayKey: redemption.effectiveReplayKey)
            })
        }
        return Entitlement.fold(redemption, revocation: revocation, events: history, now: now)
    }

    /// Refuses tokens for what no longer entitles: 410 `revoked`, 403 `entitlementExpired`.
    static func checkEntitles(_ entitlement: Entitlement) throws(VaultFailure) {
        switch entitlement.state {
        case .active: return
        case .revoked: throw VaultFailure(.revoked, "purchase \(entitlement.redemption.effectiveReplayKey) was refunded or revoked")
        case .expired:
            throw VaultFailure(
                .entitlementExpired,
                "the subscription \(entitlement.redemption.effectiveReplayKey) lapsed at \(entitlement.endsAt.map(RFC3339.format) ?? "?")")
        }
    }

    /// What `player` owns, oldest first, a page after `after` (a redemption's sequence): every
    /// non-consumable and subscription bound to them with its state, and fresh tokens for those
    /// that entitle now (a new device needs no receipt). Consumables are used up, not owned.
    /// Only chained redemptions count. `next` is the cursor of the following page, if any.
    public func entitlements(of player: Player, after: Int64 = 0, now: Date) async throws(VaultFailure) -> (
        items: [OwnedEntitlement], next: Int64?
    ) {
        var filter = AuditFilter()
        filter.playerId = player.id
        filter.after = after
        filter.limit = Self.maxEntitlements
        let page = try await storage({ try await ledger.redemptions(filter) })
        var out: [OwnedEntitlement] = []
        for listed in page {
            // Bytes, not Unicode equivalence: the stores compare bytes too.
            guard listed.playerId?.utf8.elementsEqual(player.id.utf8) == true,
                let product = try await storage({ try await catalogue.product(listed.productId) }), product.type != .consumable,
                let redemption = try await storage({
                    try await ledger.redemption(environment: listed.environment, replayKey: listed.effectiveReplayKey)
                }), redemption.redemptionId == listed.redemptionId
            else { continue }
            let entitlement = try await entitlement(of: redemption, now: now)
            let assets =
                entitlement.state == .active ? issue(try await catalogued(product), for: redemption, now: now, endsAt: entitlement.endsAt) : []
            out.append(OwnedEntitlement(entitlement: entitlement, assets: assets))
        }
        return (out, page.count == Self.maxEntitlements ? page.last?.sequence : nil)
    }
}
