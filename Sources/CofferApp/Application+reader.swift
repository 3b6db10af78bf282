import CofferCore
import CofferServer
import Configuration
import Hummingbird
import Logging

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
/// set): opens the data directory (``SQLiteStorage``), lets `prepare` fill it before anything
/// is served (`coffer serve --demo` loads its catalogue there), and builds the application,
/// which closes the storage when it stops (``StorageService``).
public func buildApplication(
    _ configuration: CofferConfiguration, logger: Logger, prepare: (SQLiteStorage) async throws -> Void = { _ in }
) async throws -> some ApplicationProtocol {
    let storage: SQLiteStorage
    do { storage = try await SQLiteStorage.open(configuration, logger: logger) } catch {
        throw StorageOpenError(dataDirectory: configuration.dataDirectory, underlying: error)
    }
    try await prepare(storage)
    logger.info(
        "Coffer listening",
        metadata: [
            "address": "\(configuration.host):\(configuration.port)", "data": "\(configuration.dataDirectory)",
            "bundleIds": "\(configuration.bundleIds.sorted())",
            "anchors": "\(configuration.anchors.map { "\($0.certificate.commonName ?? "?") → \($0.environments.sorted().map(\.rawValue))" })",
        ])
    return buildApplication(
        configuration, dependencies: storage.dependencies, services: [StorageService(storage, logger: logger), LedgerWriterService(storage)],
        logger: logger)
}
