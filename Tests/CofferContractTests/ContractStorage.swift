import CofferCore

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
    /// Makes every admin-log write fail (true) or work again (false), as a database refusing
    /// the log's insert would: for the tests that no admin change is stored without its entry.
    var failAdminLogWrites: @Sendable (Bool) async throws -> Void
}
