import CofferCore
import CofferStore
import Foundation
import Logging

/// The opened storage and domain services of one data directory.
public struct CofferServices: Sendable {
    public let configuration: CofferConfiguration
    public let database: CofferDatabase
    public let catalogue: CachedCatalogue
    public let ledger: SQLiteLedger
    public let ledgerSigner: LedgerSigner
    public let keys: SQLiteKeys
    public let adminLog: SQLiteAdminLog
    public let content: ContentStore
    public let vault: Vault
    public let metrics: CofferMetrics
    /// Uploads in progress (``CofferConfiguration/maxConcurrentUploads``).
    let uploads: Gate

    /// Opens (creating when needed) the data directory: database with migrations applied,
    /// content store with leftover temporary files removed, token keys.
    public static func open(_ configuration: CofferConfiguration, logger: Logger) async throws -> CofferServices {
        let fm = FileManager.default
        try fm.createDirectory(atPath: configuration.dataDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let database = try CofferDatabase(path: (configuration.dataDirectory as NSString).appendingPathComponent("coffer.sqlite"))
        let content = try ContentStore(root: (configuration.dataDirectory as NSString).appendingPathComponent("content"))
        let cleaned = try content.cleanTemporaryFiles()
        if cleaned > 0 { logger.warning("removed \(cleaned) partial upload(s) left by an earlier run") }
        let signer = try TokenKeyFile.signer(dataDirectory: configuration.dataDirectory, configured: configuration.tokenKeyBase64)
        let catalogue = CachedCatalogue(SQLiteCatalogue(database))
        let ledgerKey = try LedgerKeyFile.resolve(dataDirectory: configuration.dataDirectory, configured: configuration.ledgerKeyFile)
        if ledgerKey.insideDataDirectory {
            logger.notice(
                "the ledger signing key is in the data directory: whoever copies it can re-sign a rewritten ledger; keep it apart with --ledger-key",
                metadata: ["path": "\(ledgerKey.path)"])
        }
        let ledgerSigner = ledgerKey.signer
        let policy = CheckpointPolicy(signer: ledgerSigner, every: configuration.checkpointEvery)
        let ledger = SQLiteLedger(database, checkpoints: policy)
        // Start-up never chains a row it did not write: a row outside the chain is either from
        // an older Coffer (adopt it on purpose) or was inserted behind the server's back.
        let unchained = try await ledger.unchainedRows(limit: 10)
        if !unchained.isEmpty { throw LedgerStartupError.unchainedRows(unchained) }
        let altered = try await ledger.schemaProblems()
        if !altered.isEmpty { throw LedgerStartupError.schemaAltered(altered) }
        do { try await ledger.checkSeal(now: Date()) } catch let error as LedgerIntegrityError { throw LedgerStartupError.sealBroken(error) }
        let verifier = AppStoreVerifier(
            configuration: VerifierConfiguration(
                anchors: configuration.anchors, bundleIds: configuration.bundleIds, appAppleId: configuration.appAppleId))
        return CofferServices(
            configuration: configuration, database: database, catalogue: catalogue, ledger: ledger, ledgerSigner: ledgerSigner,
            keys: SQLiteKeys(database), adminLog: SQLiteAdminLog(database, checkpoints: policy),
            content: content,
            vault: Vault(verifier: verifier, catalogue: catalogue, ledger: ledger, tokens: signer, tokenTTL: configuration.tokenTTL),
            metrics: CofferMetrics(), uploads: Gate(capacity: configuration.maxConcurrentUploads))
    }
}
