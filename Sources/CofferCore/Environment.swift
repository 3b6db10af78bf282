/// The App Store environment a receipt or signed transaction claims to come from.
public enum Environment: String, Sendable, Hashable, CaseIterable, Codable, Comparable {
    case production = "Production"
    case sandbox = "Sandbox"
    case xcode = "Xcode"
    /// Coffer's own sandbox CA (`coffer sandbox …`): for local testing and demos only.
    case localTesting = "LocalTesting"

    /// Parses the environment names used by StoreKit 2 (`Production`, `Sandbox`, `Xcode`,
    /// `LocalTesting`) and the legacy receipt-type strings (`ProductionSandbox`,
    /// `ProductionVPP`, `ProductionVPPSandbox`), case-insensitively.
    public init?(claim: String) {
        switch claim.lowercased() {
        case "production", "productionvpp": self = .production
        case "sandbox", "productionsandbox", "productionvppsandbox": self = .sandbox
        case "xcode": self = .xcode
        case "localtesting": self = .localTesting
        default: return nil
        }
    }

    public static func < (lhs: Self, rhs: Self) -> Bool {
        lhs.rank < rhs.rank
    }

    private var rank: Int {
        switch self {
        case .production: 0
        case .sandbox: 1
        case .xcode: 2
        case .localTesting: 3
        }
    }
}
