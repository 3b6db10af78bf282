import Foundation

/// Products and assets. Implementations: in-memory (CofferTestSupport), SQLite (CofferStore),
/// PostgreSQL (CofferPostgres).
///
/// A change given `logging` records that entry in the admin log in the same transaction: the
/// change and its entry are stored together or not at all (a change an auditor cannot see
/// must never land because the log's write failed after it). Nothing is logged when nothing
/// changed (`deleteProduct` of an unknown id).
public protocol CatalogueRepository: Sendable {
    func putProduct(_ product: Product, logging: AdminAction?) async throws
    func product(_ productId: String) async throws -> Product?
    func products() async throws -> [Product]
    /// Returns whether a product was deleted.
    func deleteProduct(_ productId: String, logging: AdminAction?) async throws -> Bool
    /// Stores a new version of an asset (version = latest + 1) and returns it; `logging` makes
    /// the admin-log entry from the version stored.
    func addAssetVersion(
        assetId: String, name: String, contentType: String, size: Int64, sha256: String, at: Date, logging: AssetLogging?
    ) async throws -> Asset
    /// The latest version of an asset.
    func asset(_ assetId: String) async throws -> Asset?
    /// Latest versions of all assets.
    func assets() async throws -> [Asset]
    /// Every version of one asset, newest first (empty for an unknown asset).
    func versions(of assetId: String) async throws -> [Asset]
    /// The SHA-256 of every version of every asset: the objects the content store must keep
    /// (an older version stays downloadable while tokens for it live; `coffer content gc`).
    func referencedDigests() async throws -> Set<String>
}

/// Makes the admin-log entry of an asset upload from the version stored.
public typealias AssetLogging = @Sendable (Asset) -> AdminAction
