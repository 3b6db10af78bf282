import CofferCore
import CofferPostgres
import CofferServer
import CofferStore
import Foundation
import Logging

/// The composition root of a scaled-out deployment: the catalogue, ledger, keys and admin log
/// in one PostgreSQL database that several instances share; the content, the download-token
/// keys and the ledger signing key in the data directory (instances share those files, so a
/// token minted by one is accepted by the others and they seal one chain with one key).
public struct PostgresStorage: CofferStorage {
    /// How long an instance serves a cached product or asset before reading it again: a change
    /// made through another instance is seen here within this time.
    public static let catalogueMaxAge: Duration = .seconds(2)

    public let configuration: CofferConfiguration
    public let backend: PostgresBackend
    public let catalogue: CachedCatalogue
    public let ledger: PostgresLedger
    public let ledgerSigner: LedgerSigner
    public let tokens: TokenSigner
    public let keys: PostgresKeys
    public let adminLog: PostgresAdminLog
    public let content: any ContentStore

    public var keyRepository: any KeyRepository { keys }
    public var deliveryRepository: any DeliveryRepository { PostgresDeliveries(backend) }
    public var databaseDescription: String { backend.url.description }

    public var dependencies: ServerDependencies {
        ServerDependencies(
            catalogue: catalogue, ledger: ledger, ledgerAudit: ledger, keys: keys, adminLog: adminLog, content: content, tokens: tokens,
            ledgerSigner: ledgerSigner, ledgerHighWater: LedgerHighWaterFile(configuration, signer: ledgerSigner))
    }

    /// Opens the data directory's files, connects to `url`, applies pending migrations (other
    /// instances starting at once wait their turn), and refuses a ledger changed behind the
    /// instances' backs (``LedgerStartupError``).
    public static func open(_ configuration: CofferConfiguration, url: PostgresURL, logger: Logger) async throws -> PostgresStorage {
        let files = try await LocalFiles.open(configuration, shared: true, logger: logger)
        if !url.isLocal && url.sslMode != .verifyFull {
            logger.warning(
                "the database is on another machine and sslmode is \(url.sslMode.rawValue): use sslmode=verify-full (and sslrootcert) so nobody in between can read or alter the ledger"
            )
        }
        let shared = configuration.databaseSharedConnections
        if configuration.auditConcurrency >= shared {
            logger.warning(
                "audit-concurrency \(configuration.auditConcurrency) lets audit requests hold all \(shared) shared database connection(s) (database-pool-size \(configuration.databasePoolSize)): key checks, replays and grant exchanges may wait behind auditors' scans; raise database-pool-size or lower audit-concurrency"
            )
        }
        let backend: PostgresBackend
        do { backend = try await PostgresBackend.open(url, poolSize: configuration.databasePoolSize, logger: logger) } catch {
            await ContentStores.close(files.content)
            throw error
        }
        do {
            let applied = try await backend.migrate()
            if !applied.isEmpty { logger.info("applied database migrations", metadata: ["migrations": "\(applied)"]) }
            let policy = CheckpointPolicy(signer: files.ledgerSigner, every: configuration.checkpointEvery)
            let ledger = PostgresLedger(backend, checkpoints: policy)
            try await ledger.checkStartup(highWater: LedgerHighWaterFile(configuration, signer: files.ledgerSigner))
            let adminLog = PostgresAdminLog(backend, checkpoints: policy)
            let stored = PostgresCatalogue(backend, checkpoints: policy)
            ContentStores.attach(pins: stored, to: files.content)
            let catalogue = CachedCatalogue(
                stored, maxAge: catalogueMaxAge, backing: .logged(ledger, signer: files.ledgerSigner, logger: logger))
            try await catalogue.checkStartup()
            return PostgresStorage(
                configuration: configuration, backend: backend, catalogue: catalogue, ledger: ledger, ledgerSigner: files.ledgerSigner,
                tokens: files.tokens, keys: PostgresKeys(backend, checkpoints: policy), adminLog: adminLog, content: files.content)
        } catch {
            await backend.close()
            await ContentStores.close(files.content)
            throw error
        }
    }

    public func finishWrites() async { await ledger.finishWrites() }

    /// Closes the pool — after the writer's last batch (idempotent if the server already
    /// finished it): a batch must not run on the backend's thread once that thread is gone.
    public func close() async throws {
        await ledger.finishWrites()
        await backend.close()
        await ContentStores.close(content)
    }
}

extension PostgresLedger: StartupCheckedLedger {}
