import Foundation

/// Every path in Coffer's data directory, derived from its root: the database, the content
/// store, the key files and (in demo mode) the sandbox CA. Pure: names paths, touches nothing.
///
///     DATA/coffer.sqlite
///     DATA/content/
///     DATA/keys/download-tokens.json
///     DATA/keys/ledger-signing.key
///     DATA/ledger-high-water.json
///     DATA/sandbox/            (coffer serve --demo)
public struct DataDirectory: Sendable, Hashable {
    static let ledgerKeyFileName = "ledger-signing.key"

    /// The data directory itself, as configured (`--data-dir`).
    public let path: String

    public init(_ path: String) { self.path = path }

    /// The SQLite database: catalogue, ledger, keys, admin log.
    public var database: String { Self.join(path, "coffer.sqlite") }
    /// The content store's root.
    public var content: String { Self.join(path, "content") }
    /// The object store's read-through cache (``CofferStore/CachedContentStore``).
    public var cache: String { Self.join(path, "cache") }
    /// The key files' directory (0700).
    public var keys: String { Self.join(path, "keys") }
    /// The download-token HMAC keys (0600).
    public var tokenKeys: String { Self.join(keys, "download-tokens.json") }
    /// The ledger checkpoint signing key, when it is kept in the data directory.
    public var ledgerKey: String { Self.join(keys, Self.ledgerKeyFileName) }
    /// The ledger signing key handed over by systemd (`LoadCredential=`) in `$CREDENTIALS_DIRECTORY`.
    public static func ledgerKey(inCredentials credentialsDirectory: String) -> String { join(credentialsDirectory, ledgerKeyFileName) }
    /// The furthest the ledger was seen sealed (``LedgerHighWater``), outside the database.
    public var ledgerHighWater: String { Self.join(path, "ledger-high-water.json") }
    /// The demo mode's sandbox CA and demo keys.
    public var sandbox: SandboxDirectory { SandboxDirectory(Self.join(path, "sandbox")) }

    /// `directory/name`, as Foundation joins path components (no doubled `/`).
    static func join(_ directory: String, _ name: String) -> String {
        (directory as NSString).appendingPathComponent(name)
    }
}
