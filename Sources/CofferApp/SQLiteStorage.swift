import CofferCore
import CofferServer
import CofferStore
import Foundation
import Logging

/// The composition root of the embedded deployment: SQLite in the data directory for the
/// catalogue, ledger, keys and admin log, the local content store, and the key files. It
/// opens and checks them, hands the server their protocols (``dependencies``), and closes the
/// database when the server has stopped.
public struct SQLiteStorage: Sendable {
    public let configuration: CofferConfiguration
    public let database: CofferDatabase
    public let catalogue: CachedCatalogue
    public let ledger: SQLiteLedger
    public let ledgerSigner: LedgerSigner
    public let tokens: TokenSigner
    public let keys: SQLiteKeys
    public let adminLog: SQLiteAdminLog
    public let content: LocalContentStore

    /// What the HTTP layer is built over.
    public var dependencies: ServerDependencies {
        ServerDependencies(
            catalogue: catalogue, ledger: ledger, ledgerAudit: ledger, keys: keys, adminLog: adminLog, content: content, tokens: tokens,
            ledgerSigner: ledgerSigner)
    }

    /// Opens (creating when needed) the data directory: database with migrations applied,
    /// content store with leftover temporary files removed, token keys, the ledger signing
    /// key; refuses a ledger that was changed behind the server's back (``LedgerStartupError``).
    public static func open(_ configuration: CofferConfiguration, logger: Logger) async throws -> SQLiteStorage {
        let directory = DataDirectory(configuration.dataDirectory)
        try FileManager.default.createDirectory(atPath: directory.path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let database = try CofferDatabase(path: directory.database)
        let content = try LocalContentStore(root: directory.content)
        let cleaned = try content.cleanTemporaryFiles()
        if cleaned > 0 { logger.warning("removed \(cleaned) partial upload(s) left by an earlier run") }
        let tokens = try TokenKeyFile.signer(dataDirectory: configuration.dataDirectory, configured: configuration.tokenKeyBase64)
        let ledgerKey = try LedgerKeyFile.resolve(dataDirectory: configuration.dataDirectory, configured: configuration.ledgerKeyFile)
        if ledgerKey.insideDataDirectory {
            logger.notice(
                "the ledger signing key is in the data directory: whoever copies it can re-sign a rewritten ledger; keep it apart with --ledger-key",
                metadata: ["path": "\(ledgerKey.path)"])
        }
        let policy = CheckpointPolicy(signer: ledgerKey.signer, every: configuration.checkpointEvery)
        let ledger = SQLiteLedger(database, checkpoints: policy)
        try await checkStartup(ledger)
        return SQLiteStorage(
            configuration: configuration, database: database, catalogue: CachedCatalogue(SQLiteCatalogue(database)), ledger: ledger,
            ledgerSigner: ledgerKey.signer, tokens: tokens, keys: SQLiteKeys(database), adminLog: SQLiteAdminLog(database, checkpoints: policy),
            content: content)
    }

    /// Start-up never chains a row it did not write: a row outside the chain is either from an
    /// older Coffer (adopt it on purpose) or was inserted behind the server's back. Nor does it
    /// open a ledger whose schema or seal was altered.
    static func checkStartup(_ ledger: SQLiteLedger) async throws {
        let unchained = try await ledger.unchainedRows(limit: 10)
        if !unchained.isEmpty { throw LedgerStartupError.unchainedRows(unchained) }
        let altered = try await ledger.schemaProblems()
        if !altered.isEmpty { throw LedgerStartupError.schemaAltered(altered) }
        do { try await ledger.checkSeal(now: Date()) } catch let error as LedgerIntegrityError { throw LedgerStartupError.sealBroken(error) }
    }

    /// Closes the database (after the server stopped and signed its last checkpoint).
    public func close() throws { try database.close() }
}
