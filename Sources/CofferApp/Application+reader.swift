import CofferCore
import CofferPostgres
import CofferServer
import Configuration
import Hummingbird
import Logging
import NIOPosix

/// The server `coffer serve` runs, from its settings: the configuration read from `reader`
/// (``CofferServer/CofferConfiguration/reader(commandLine:environment:)`` gives the flags,
/// `COFFER_*` variables and config file), its trust roots loaded, the data directory opened,
/// and the HTTP application built over it.
public func buildApplication(reader: ConfigReader, logger: Logger) async throws -> some ApplicationProtocol {
    var configuration = try await CofferConfiguration(reader: reader)
    try configuration.resolveTrustAnchors()
    return try await buildApplication(configuration, logger: logger)
}

/// The server for a complete `configuration` (its ``CofferServer/CofferConfiguration/anchors``
/// set): opens its storage (``SQLiteStorage`` in the data directory, or ``PostgresStorage`` when
/// a database URL is configured), lets `prepare` fill it before anything is served
/// (`coffer serve --demo` loads its catalogue there), and builds the application, which closes
/// the storage when it stops (``StorageService``).
public func buildApplication(
    _ configuration: CofferConfiguration, logger: Logger, prepare: (any CofferStorage) async throws -> Void = { _ in }
) async throws -> some ApplicationProtocol {
    // Player keys are read first: a wrong key file fails before any storage is opened.
    var players: PlayerTokens?
    if !configuration.playerKeyFiles.isEmpty, let issuer = configuration.playerIssuer, let audience = configuration.playerAudience {
        players = try await PlayerTokens.load(
            keyFiles: configuration.playerKeyFiles, issuer: issuer, audience: audience, accountClaim: configuration.playerAccountClaim)
    }
    let storage = try await openStorage(configuration, logger: logger)
    do { try await prepare(storage) } catch {
        try? await storage.close()
        throw error
    }
    await warnAboutRefusedKeys(storage, logger: logger)
    if players != nil && configuration.legacyReceipts == .accept {
        logger.warning(
            "player identity is on and legacy receipts are accepted: a receipt carries no signed appAccountToken, so a purchase presented as one binds to whichever player redeems it first (its StoreKit 2 transaction would be refused accountMismatch). Once your clients send signedTransaction, set --legacy-receipts refuse"
        )
    }
    logger.info(
        "Coffer listening",
        metadata: [
            "address": "\(configuration.host):\(configuration.port)", "data": "\(configuration.dataDirectory)",
            "database": "\(storage.databaseDescription)", "bundleIds": "\(configuration.bundleIds.sorted())",
            "eventLoops": "\(configuration.eventLoops.map(String.init) ?? "one per core")",
            "players": "\(players.map { "issuer \($0.issuer), audience \($0.audience)" } ?? "off")",
            "anchors": "\(configuration.anchors.map { "\($0.certificate.commonName ?? "?") → \($0.environments.sorted().map(\.rawValue))" })",
        ])
    var dependencies = storage.dependencies
    dependencies.deliveries = DeliveryRecorder(repository: storage.deliveryRepository, logger: logger)
    dependencies.players = players
    // `--event-loops`: the server's own group, shut down last (the first service stops last).
    let loops = configuration.eventLoops.map { MultiThreadedEventLoopGroup(numberOfThreads: $0) }
    return buildApplication(
        configuration, dependencies: dependencies,
        services: (loops.map { [EventLoopGroupService($0, logger: logger)] } ?? []) + [
            StorageService(storage, logger: logger), LedgerWriterService(storage),
        ], eventLoopGroup: loops, logger: logger)
}

/// Opens the configured storage; a failure names what could not be opened (``StorageOpenError``).
public func openStorage(_ configuration: CofferConfiguration, logger: Logger) async throws -> any CofferStorage {
    guard let text = configuration.databaseURL else {
        do { return try await SQLiteStorage.open(configuration, logger: logger) } catch {
            throw StorageOpenError(what: "data directory \(configuration.dataDirectory)", underlying: error)
        }
    }
    let url: PostgresURL
    do { url = try PostgresURL(text) } catch { throw StorageOpenError(what: "the database URL", underlying: error) }
    do { return try await PostgresStorage.open(configuration, url: url, logger: logger) } catch {
        throw StorageOpenError(what: "database \(url)", underlying: error)
    }
}

/// Keys the ledger key did not sign are refused: says so once, at start, naming them (made
/// before keys were signed, or written into the database outside Coffer). A failure to list them
/// is logged, never a reason not to start: each key is still checked when used.
func warnAboutRefusedKeys(_ storage: any CofferStorage, logger: Logger) async {
    do {
        let refused = try await storage.keyRepository.live().filter { !$0.isAuthentic(signedBy: storage.ledgerSigner.publicKey) }
        guard !refused.isEmpty else { return }
        logger.warning(
            "\(refused.count) live API key(s) are not signed by the ledger key and are refused: made before keys were signed, or written into the database outside Coffer. `coffer keys adopt` lists them; sign the ones you recognise (`--sign KEY_ID`), revoke the others (`coffer keys revoke --key-id KEY_ID`)",
            metadata: ["keys": "\(refused.map(\.displayName).joined(separator: ", "))"])
    } catch {
        logger.error("could not check the API keys' signatures at start (each key is still checked when used)", metadata: ["error": "\(error)"])
    }
}
