import Foundation

/// Products and assets. Implementations: in-memory (CofferTestSupport), SQLite (CofferStore),
/// PostgreSQL (CofferPostgres).
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
    /// Every version of one asset, newest first (empty for an unknown asset).
    func versions(of assetId: String) async throws -> [Asset]
    /// The SHA-256 of every version of every asset: the objects the content store must keep
    /// (an older version stays downloadable while tokens for it live; `coffer content gc`).
    func referencedDigests() async throws -> Set<String>
}
