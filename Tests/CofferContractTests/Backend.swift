import CofferCore
import CofferPostgres
import CofferTestSupport
import Foundation
import Logging
import Testing

@testable import CofferStore

/// The implementations the storage contract runs against. Every contract test takes a
/// `Backend` argument (`@Test(arguments: Backend.allCases)`), so a new backend — PostgreSQL —
/// is one case here and its branch in ``withStorage(signer:checkpointEvery:_:)``: the whole
/// contract then runs on it, and the backend is done when it passes.
enum Backend: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// The doubles of CofferTestSupport.
    case inMemory
    /// The embedded deployment: SQLite and the local content store in a temporary directory.
    case sqlite
    /// The scaled-out deployment: a fresh database on a real PostgreSQL server (a throwaway
    /// cluster this test process starts, or `COFFER_TEST_POSTGRES_URL`'s); content stays local.
    /// Never skipped: without PostgreSQL installed the tests fail, saying how to install it.
    case postgres

    var testDescription: String { rawValue }

    /// Runs `body` over fresh, empty storage of this backend, and disposes of it afterwards.
    /// `signer` signs the ledger's checkpoints (every `checkpointEvery` entries) and its seal;
    /// nil keeps the chain unsigned.
    func withStorage<T>(
        signer: LedgerSigner? = nil, checkpointEvery: Int64 = 1000, _ body: (ContractStorage) async throws -> T
    ) async throws -> T {
        switch self {
        case .inMemory:
            let ledger = InMemoryLedger(signer: signer, checkpointEvery: checkpointEvery)
            return try await body(
                ContractStorage(
                    catalogue: InMemoryCatalogue(adminLog: ledger), ledger: ledger, ledgerAudit: ledger, adminLog: ledger,
                    keys: InMemoryKeys(adminLog: ledger),
                    content: InMemoryContentStore(chunkSize: 7), deliveries: ledger, pins: InMemoryContentPins(),
                    failAdminLogWrites: { await ledger.failAdminLogWrites($0) }))
        case .sqlite:
            return try await withTemporaryDirectory(prefix: "coffer-contract") { directory in
                let database = try CofferDatabase(path: directory.appendingPathComponent("coffer.sqlite").path)
                defer { try? database.close() }
                let policy = signer.map { CheckpointPolicy(signer: $0, every: checkpointEvery) }
                let ledger = SQLiteLedger(database, checkpoints: policy)
                return try await body(
                    ContractStorage(
                        catalogue: SQLiteCatalogue(database, checkpoints: policy), ledger: ledger, ledgerAudit: ledger,
                        adminLog: SQLiteAdminLog(database, checkpoints: policy), keys: SQLiteKeys(database, checkpoints: policy),
                        content: try LocalContentStore(root: directory.appendingPathComponent("content").path),
                        deliveries: SQLiteDeliveries(database), pins: SQLiteCatalogue(database),
                        failAdminLogWrites: { fail in
                            try await database.pool.write { db in
                                try db.execute(
                                    sql: fail
                                        ? "CREATE TRIGGER contract_admin_log_down BEFORE INSERT ON admin_actions BEGIN SELECT RAISE(ABORT, 'admin log down'); END"
                                        : "DROP TRIGGER contract_admin_log_down")
                            }
                        },
                        execute: { sql in try await database.pool.write { db in try db.execute(sql: sql) } },
                        audit: { key in try await ledger.audit(publicKey: key) },
                        adoptCatalogue: { actor in
                            let adoption = try await ledger.adopt(by: actor, now: actor.at)
                            return (adoption.catalogue, adoption.action)
                        }))
            }
        case .postgres:
            let url = try PostgresURL(try await PostgresCluster.shared().createDatabase())
            // No deadline: 37 tests migrate fresh databases at once on a 2-core box (ScaleOutTests checks the deadline).
            let backend = try await PostgresBackend.open(url, poolSize: 4, timeouts: false, logger: Logger(label: "contract"))
            do {
                try await backend.migrate()
                let policy = signer.map { CheckpointPolicy(signer: $0, every: checkpointEvery) }
                let ledger = PostgresLedger(backend, checkpoints: policy)
                let result = try await withTemporaryDirectory(prefix: "coffer-contract") { directory in
                    try await body(
                        ContractStorage(
                            catalogue: PostgresCatalogue(backend, checkpoints: policy), ledger: ledger, ledgerAudit: ledger,
                            adminLog: PostgresAdminLog(backend, checkpoints: policy), keys: PostgresKeys(backend, checkpoints: policy),
                            content: try LocalContentStore(root: directory.appendingPathComponent("content").path),
                            deliveries: PostgresDeliveries(backend), pins: PostgresCatalogue(backend),
                            failAdminLogWrites: { fail in
                                _ = try await PostgresCluster.shared().psql(
                                    fail
                                        ? """
                                        CREATE FUNCTION contract_admin_log_down() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE 'admin log down'; END $$;
                                        CREATE TRIGGER contract_admin_log_down BEFORE INSERT ON admin_actions FOR EACH ROW EXECUTE FUNCTION contract_admin_log_down();
                                        """
                                        : "DROP TRIGGER contract_admin_log_down ON admin_actions; DROP FUNCTION contract_admin_log_down();",
                                    database: url.database)
                            },
                            execute: { sql in _ = try await PostgresCluster.shared().psql(sql, database: url.database) },
                            audit: { key in try await ledger.audit(publicKey: key) },
                            adoptCatalogue: { actor in try await ledger.adoptCatalogue(by: actor) }))
                }
                await ledger.finishWrites()
                await backend.close()
                return result
            } catch {
                await backend.close()
                throw error
            }
        }
    }
}
