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
        return Entitlement.fold(redemption, revoked: revocation != nil, events: history, now: now)
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

    /// What `player` owns, oldest first: every purchase bound to them with its state, and fresh
    /// tokens for those that entitle now (a new device needs no receipt).
    public func entitlements(of player: Player, now: Date) async throws(VaultFailure) -> [OwnedEntitlement] {
        var filter = AuditFilter()
        filter.playerId = player.id
        filter.limit = Self.maxEntitlements
        let owned = try await storage({ try await ledger.redemptions(filter) })
        var out: [OwnedEntitlement] = []
        for redemption in owned {
            let entitlement = try await entitlement(of: redemption, now: now)
            var assets: [IssuedAsset] = []
            if entitlement.state == .active, let product = try await storage({ try await catalogue.product(redemption.productId) }) {
                assets = try await issue(product, for: redemption, now: now, endsAt: entitlement.endsAt)
            }
            out.append(OwnedEntitlement(entitlement: entitlement, assets: assets))
        }
        return out
    }
}
