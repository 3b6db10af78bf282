import CofferCore
import CofferServer
import CofferStore
import Foundation
import Logging

/// The composition root of the embedded deployment: SQLite in the data directory for the
/// catalogue, ledger, keys and admin log, the local content store, and the key files. It
/// opens and checks them, hands the server their protocols (``dependencies``), and closes the
/// database when the server has stopped.
public struct SQLiteStorage: CofferStorage {
    public let configuration: CofferConfiguration
    public let database: CofferDatabase
    public let catalogue: CachedCatalogue
    public let ledger: SQLiteLedger
    public let ledgerSigner: LedgerSigner
    public let tokens: TokenSigner
    public let keys: SQLiteKeys
    public let adminLog: SQLiteAdminLog
    public let content: any ContentStore

    public var keyRepository: any KeyRepository { keys }
    public var deliveryRepository: any DeliveryRepository { SQLiteDeliveries(database) }
    public var databaseDescription: String { "SQLite in the data directory" }

    public var dependencies: ServerDependencies {
        ServerDependencies(
            catalogue: catalogue, ledger: ledger, ledgerAudit: ledger, keys: keys, adminLog: adminLog, content: content, tokens: tokens,
            ledgerSigner: ledgerSigner, ledgerHighWater: LedgerHighWaterFile(configuration, signer: ledgerSigner))
    }

    /// Opens (creating when needed) the data directory: database with migrations applied,
    /// content store with leftover temporary files removed, token keys, the ledger signing
    /// key; refuses a ledger that was changed behind the server's back (``LedgerStartupError``).
    public static func open(_ configuration: CofferConfiguration, logger: Logger) async throws -> SQLiteStorage {
        let files = try await LocalFiles.open(configuration, logger: logger)
        let database: CofferDatabase
        do { database = try CofferDatabase(path: DataDirectory(configuration.dataDirectory).database) } catch {
            await ContentStores.close(files.content)
            throw error
        }
        let policy = CheckpointPolicy(signer: files.ledgerSigner, every: configuration.checkpointEvery)
        let ledger = SQLiteLedger(database, checkpoints: policy)
        let adminLog = SQLiteAdminLog(database, checkpoints: policy)
        let stored = SQLiteCatalogue(database, checkpoints: policy)
        ContentStores.attach(pins: stored, to: files.content)
        let catalogue = CachedCatalogue(stored, backing: .logged(ledger, signer: files.ledgerSigner, logger: logger))
        do {
            try await ledger.checkStartup(highWater: LedgerHighWaterFile(configuration, signer: files.ledgerSigner))
            try await catalogue.checkStartup()
        } catch {
            try? database.close()
            await ContentStores.close(files.content)
            throw error
        }
        return SQLiteStorage(
            configuration: configuration, database: database, catalogue: catalogue, ledger: ledger, ledgerSigner: files.ledgerSigner,
            tokens: files.tokens, keys: SQLiteKeys(database, checkpoints: policy), adminLog: adminLog, content: files.content)
    }

    public func finishWrites() async { await ledger.finishWrites() }

    public func close() async throws {
        await ContentStores.close(content)
        try database.close()
    }
}
