import CofferCore
import Crypto

/// One backend's implementation of every storage protocol, over one store: the ledger, its
/// audit side and the admin log share one hash chain.
struct ContractStorage: Sendable {
    var catalogue: any CatalogueRepository
    var ledger: any LedgerRepository
    var ledgerAudit: any LedgerAuditRepository
    var adminLog: any AdminLogRepository
    var keys: any KeyRepository
    var content: any ContentStore
    var deliveries: any DeliveryRepository
    var pins: any ContentPinRepository
    /// Makes every admin-log write fail (true) or work again (false), as a database refusing
    /// the log's insert would: for the tests that no admin change is stored without its entry.
    var failAdminLogWrites: @Sendable (Bool) async throws -> Void
    /// Runs SQL on the database behind the repositories' back, as an insider with the file or
    /// the owner role would (nil for the in-memory doubles).
    var execute: (@Sendable (String) async throws -> Void)? = nil
    /// The database audit (`coffer ledger verify`'s) with this public key (nil for the doubles).
    var audit: (@Sendable (Curve25519.Signing.PublicKey?) async throws -> LedgerAuditReport)? = nil
    /// `coffer ledger adopt`'s catalogue part by `actor`: the rows found and the adoption's
    /// entry (nil for the doubles).
    var adoptCatalogue: (@Sendable (AdminAction) async throws -> (catalogue: [CatalogueFinding], action: AdminAction))? = nil
}
