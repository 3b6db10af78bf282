import CofferCore
import CofferServer
import CofferStore
import Foundation
import Logging

/// The storage one deployment serves from: SQLite in the data directory (``SQLiteStorage``)
/// or a PostgreSQL database shared by several instances (``PostgresStorage``). Either way the
/// data directory holds the content, the download-token keys and the ledger signing key.
public protocol CofferStorage: Sendable {
    var configuration: CofferConfiguration { get }
    /// The catalogue (the demo fills it), read through a cache.
    var catalogue: CachedCatalogue { get }
    var keyRepository: any KeyRepository { get }
    /// The ledger signing key: it seals the chain and signs API keys.
    var ledgerSigner: LedgerSigner { get }
    var content: any ContentStore { get }
    /// What the HTTP layer is built over.
    var dependencies: ServerDependencies { get }
    /// Where delivery evidence is written.
    var deliveryRepository: any DeliveryRepository { get }
    /// Stops taking ledger writes and returns once the queued ones are committed (at shutdown).
    func finishWrites() async
    /// Closes the database (after the server stopped and signed its last checkpoint).
    func close() async throws
    /// Where the ledger is, for the log: "SQLite in the data directory" or the redacted URL.
    var databaseDescription: String { get }
}

/// What every deployment keeps in its data directory (and the content store), opened and checked.
struct LocalFiles {
    var content: any ContentStore
    var tokens: TokenSigner
    var ledgerSigner: LedgerSigner

    /// Creates the data directory (0700) when needed, removes partial uploads an earlier run
    /// left, and loads (or creates) the token keys and the ledger signing key.
    /// `shared`: other instances may use the directory at the same time (only partial uploads
    /// untouched for an hour are removed then).
    static func open(_ configuration: CofferConfiguration, shared: Bool = false, logger: Logger) async throws -> LocalFiles {
        let directory = DataDirectory(configuration.dataDirectory)
        try FileManager.default.createDirectory(atPath: directory.path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let tokens = try TokenKeyFile.signer(dataDirectory: configuration.dataDirectory, configured: configuration.tokenKeyBase64)
        let ledgerKey = try LedgerKeyFile.resolve(dataDirectory: configuration.dataDirectory, configured: configuration.ledgerKeyFile)
        if ledgerKey.insideDataDirectory {
            logger.notice(
                "the ledger signing key is in the data directory: whoever copies it can re-sign a rewritten ledger; keep it apart with --ledger-key",
                metadata: ["path": "\(ledgerKey.path)"])
        }
        let content = try await ContentStores.open(configuration, shared: shared, logger: logger)
        do {
            return LocalFiles(
                content: try ContentStores.cached(content, configuration, logger: logger), tokens: tokens, ledgerSigner: ledgerKey.signer)
        } catch {
            await ContentStores.close(content)
            throw error
        }
    }
}

/// The start-up checks every ledger passes before the server appends to it.
protocol StartupCheckedLedger: Sendable {
    func unchainedRows(limit: Int) async throws -> [(kind: LedgerEventKind, row: Int64)]
    func schemaProblems() async throws -> [String]
    func checkSeal(now: Date) async throws
}

extension StartupCheckedLedger where Self: LedgerAuditRepository {
    /// Start-up never chains a row it did not write: a row outside the chain is either from an
    /// older Coffer (adopt it on purpose) or was inserted behind the server's back. Nor does it
    /// open a ledger whose schema or seal was altered, or one put back behind the data
    /// directory's `highWater` mark (then raised to the seal as it stands).
    func checkStartup(highWater: LedgerHighWaterFile) async throws {
        let unchained = try await unchainedRows(limit: 10)
        if !unchained.isEmpty { throw LedgerStartupError.unchainedRows(unchained) }
        let altered = try await schemaProblems()
        if !altered.isEmpty { throw LedgerStartupError.schemaAltered(altered) }
        do { try await checkSeal(now: Date()) } catch let error as LedgerIntegrityError { throw LedgerStartupError.sealBroken(error) }
        try await highWater.raise(self)
    }
}

extension SQLiteLedger: StartupCheckedLedger {}

extension CatalogueBacking {
    /// The check of every catalogue row the server reads against the chained admin log,
    /// reporting to `logger` each row it refuses.
    static func logged(_ ledger: any CatalogueLogSource, signer: LedgerSigner, logger: Logger) -> CatalogueBacking {
        CatalogueBacking(ledger, publicKey: signer.publicKey) { message in logger.error("\(message)") }
    }
}

extension CachedCatalogue {
    /// Start-up never serves a catalogue the admin log does not back: a product or asset
    /// version changed behind the server's back, or from before Coffer logged every change.
    func checkStartup() async throws {
        let unbacked: [CatalogueFinding]
        do { unbacked = try await self.unbacked() } catch let broken as CatalogueBacking.LogBroken {
            throw LedgerStartupError.adminLogBroken(broken.failure)
        }
        if !unbacked.isEmpty { throw LedgerStartupError.catalogueUnbacked(unbacked) }
    }
}
