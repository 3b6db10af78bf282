import ArgumentParser
import CofferApp
import CofferClient
import CofferCore
import CofferPostgres
import CofferServer
import CofferStore
import Crypto
import Foundation

struct LedgerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ledger", abstract: "Prove the redemption ledger untampered.",
        subcommands: [Verify.self, Export.self, Copy.self, PublicKey.self, Adopt.self, Keygen.self])

    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check the hash chain and the signed checkpoints of a database or an export.",
            discussion: """
                Exit 0 when intact, 1 when not (the first bad sequence number is named), 2 on usage errors. \
                With --data-dir the database is opened read-only (nothing is migrated or written), while \
                the server runs or not. Pass --public-key with the key you obtained earlier \
                (GET /v1/audit/public-key, kept apart from the server): without it the key in the data \
                directory (or --ledger-key) or in the export is used, which shows only that the ledger is \
                consistent with itself. Pass --checkpoint with checkpoints you saved earlier \
                (GET /v1/audit/checkpoints or /latest): the ledger must still extend each of them, so a \
                rewritten, truncated or re-signed history fails even if its new checkpoints verify.
                """)
        @Option(name: .customLong("data-dir"), help: "Data directory to check.") var dataDir: String?
        @Option(help: "An export (GET /v1/audit/export?kind=ledger or coffer ledger export) to check offline.") var export: String?
        @Option(help: ArgumentHelp(DatabaseOption.help + " Read in one snapshot while the instances run."))
        var database: String?
        @Option(
            name: .customLong("public-key"), help: "The checkpoint public key: a file (PEM, base64 or the JSON of /v1/audit/public-key) or base64.")
        var publicKey: String?
        @Option(
            name: .customLong("checkpoint"),
            help: "A file of checkpoints saved earlier (one checkpoint, a /v1/audit/checkpoints page, an array or NDJSON). Repeatable.")
        var checkpoints: [String] = []
        @Option(name: .customLong("ledger-key"), help: "The signing key file, when it lives outside the data directory (its public half is used).")
        var ledgerKey: String?
        @Flag(help: "Print the report as JSON.") var json = false

        func run() async throws {
            let key = try publicKey.map(Self.loadKey)
            var pinned: [LedgerCheckpoint] = []
            for file in checkpoints {
                guard let saved = LedgerCheckpoint.saved(Data(try IO.read(file))) else {
                    throw UsageError("--checkpoint \(file): no checkpoint in it (expected the JSON of /v1/audit/checkpoints or /latest)")
                }
                pinned += saved
            }
            let report: LedgerAuditReport
            switch (dataDir, export, database) {
            case (let dir, nil, let database?):
                let trusted = try key ?? Self.serverKey(dataDir: dir, ledgerKey: ledgerKey)
                report = try await DatabaseOption.with(database) { backend in
                    try await PostgresLedger(backend).audit(publicKey: trusted, pinned: pinned)
                }
            case (let dir?, nil, nil):
                let path = DataDirectory(dir).database
                guard FileManager.default.fileExists(atPath: path) else { throw UsageError("no database at \(path)") }
                let trusted = try key ?? LedgerKeyFile.resolve(dataDirectory: dir, configured: ledgerKey, create: false).signer.publicKey
                let database: CofferDatabase
                do { database = try CofferDatabase(readOnlyPath: path) } catch { throw UsageError("cannot open \(path) read-only: \(error)") }
                report = try await SQLiteLedger(database).audit(publicKey: trusted, pinned: pinned)
            case (nil, let file?, nil):
                report = LedgerExport.verify(Data(try IO.read(file)), publicKey: key, pinned: pinned)
            default:
                throw UsageError("pass exactly one of --data-dir, --database or --export")
            }
            print(json ? Terminal.safeJSON(try Self.json(report)) : Self.text(report))
            if !report.intact { throw ExitCode(1) }
        }

        /// The public half of the server's key, from the data directory (or --ledger-key) the
        /// instances use: without --public-key, that only shows the ledger consistent with itself.
        static func serverKey(dataDir: String?, ledgerKey: String?) throws -> Curve25519.Signing.PublicKey {
            do {
                return try LedgerKeyFile.resolve(dataDirectory: dataDir ?? "coffer-data", configured: ledgerKey, create: false).signer.publicKey
            } catch {
                throw UsageError("\(error): pass the checkpoint public key with --public-key (or the data directory with --data-dir)")
            }
        }

        static func loadKey(_ value: String) throws -> Curve25519.Signing.PublicKey {
            let text = FileManager.default.fileExists(atPath: value) ? String(decoding: try IO.read(value), as: UTF8.self) : value
            guard let key = LedgerKeys.parse(text) else { throw UsageError("--public-key: not an Ed25519 public key (PEM, base64 or JSON)") }
            return key
        }

        static func text(_ r: LedgerAuditReport) -> String {
            let catalogueOnly = r.problem?.kind == .catalogueUnbacked
            var lines = [
                r.intact ? "ledger intact" : catalogueOnly ? "CATALOGUE NOT BACKED BY THE ADMIN LOG (the chain itself verifies)" : "LEDGER TAMPERED",
                "entries: \(r.entries), last sequence \(r.lastSequence), head \(r.headHash)",
                "checkpoints verified: \(r.checkpointsVerified)\(r.lastCheckpoint.map { ", latest at \($0)" } ?? "")",
            ]
            if r.pinnedVerified > 0 { lines.append("pinned checkpoints still extended: \(r.pinnedVerified)") }
            for adoption in r.adoptions { lines.append("note: an operator adopted rows (ledger.adopt) at \(adoption)") }
            if let p = r.problem {
                lines.append("problem: \(p.kind.rawValue)")
                if let s = p.sequence { lines.append("first bad sequence: \(s)") }
                lines.append("detail: \(p.detail)")
            }
            for finding in r.catalogue.prefix(Self.findingsShown) { lines.append("catalogue: \(finding.kind.rawValue): \(finding)") }
            if r.catalogue.count > Self.findingsShown {
                lines.append("catalogue: \(r.catalogue.count - Self.findingsShown) more (--json lists every one)")
            }
            // An export is read from anywhere (`audit verify` checks a server it does not
            // trust): nothing of it may move the cursor over the verdict.
            return lines.map(Terminal.safe).joined(separator: "\n")
        }

        /// How many catalogue findings the text report lists.
        static let findingsShown = 50

        static func json(_ r: LedgerAuditReport) throws -> String {
            var object: [String: Any] = [
                "intact": r.intact, "entries": r.entries, "lastSequence": r.lastSequence, "headHash": r.headHash,
                "checkpointsVerified": r.checkpointsVerified, "pinnedVerified": r.pinnedVerified, "adoptions": r.adoptions,
            ]
            object["lastCheckpoint"] = r.lastCheckpoint
            object["catalogue"] = r.catalogue.map { f -> [String: Any] in
                var finding: [String: Any] = ["kind": f.kind.rawValue, "id": f.id, "logged": f.logged, "detail": f.description]
                finding["version"] = f.version
                finding["stored"] = f.stored
                finding["entry"] = f.sequence
                return finding
            }
            if let p = r.problem {
                var problem: [String: Any] = ["kind": p.kind.rawValue, "detail": p.detail]
                problem["firstBadSequence"] = p.sequence
                object["problem"] = problem
            }
            return String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self)
        }
    }

    struct Export: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Write the chained ledger export (NDJSON) of a data directory.")
        @Option(name: .customLong("data-dir"), help: "Data directory.") var dataDir = "coffer-data"
        @Option(help: "Output file (default: standard output).") var out: String?
        @Option(name: .customLong("ledger-key"), help: "The signing key file, when it lives outside the data directory.") var ledgerKey: String?
        @Option(help: ArgumentHelp(DatabaseOption.help)) var database: String?

        func run() async throws {
            if let database {
                let key = try Verify.serverKey(dataDir: dataDir, ledgerKey: ledgerKey)
                var text = ""
                try await DatabaseOption.with(database) { backend in
                    try await PostgresLedger(backend).export(publicKey: key, now: Date()) { text += $0 }
                }
                // 0600: the export holds client addresses.
                return try IO.output(Array(text.utf8), to: out, mode: 0o600)
            }
            let path = DataDirectory(dataDir).database
            guard FileManager.default.fileExists(atPath: path) else { throw UsageError("no database at \(path)") }
            let key = try LedgerKeyFile.resolve(dataDirectory: dataDir, configured: ledgerKey, create: false).signer.publicKey
            let database: CofferDatabase
            do { database = try CofferDatabase(readOnlyPath: path) } catch { throw UsageError("cannot open \(path) read-only: \(error)") }
            var text = ""
            try await SQLiteLedger(database).export(publicKey: key, now: Date()) { text += $0 }
            try IO.output(Array(text.utf8), to: out, mode: 0o600)
        }
    }

    struct Copy: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Copy a data directory's SQLite ledger into an empty PostgreSQL database (the move to several instances).",
            discussion: """
                Copies the chain, checkpoints and seal, redemptions, attempts, revocations, the admin log, the API keys \
                and the catalogue in one transaction, every row with its sequence number, then verifies the copy with \
                the server's public key (exit 1 if it does not verify). The target is migrated first and must hold no \
                ledger yet. Stop the server first; afterwards start the instances with --database and the same data \
                directory (content, token keys, ledger key).
                """)
        @Option(name: .customLong("from-data-dir"), help: "The data directory whose ledger is copied.") var fromDataDir: String
        @Option(name: .customLong("to-database"), help: ArgumentHelp(DatabaseOption.help)) var toDatabase: String
        @Option(name: .customLong("ledger-key"), help: "The signing key file, when it lives outside the data directory.") var ledgerKey: String?

        func run() async throws {
            let path = DataDirectory(fromDataDir).database
            guard FileManager.default.fileExists(atPath: path) else { throw UsageError("no database at \(path)") }
            let key = try Verify.serverKey(dataDir: fromDataDir, ledgerKey: ledgerKey)
            // One snapshot, audited and then copied: nothing written to the file between the two
            // (by its holder, or by a server still running) reaches the copy unverified.
            let snapshot: LedgerCopy.Snapshot
            do { snapshot = try LedgerCopy.Snapshot(dataDirectory: fromDataDir, publicKey: key) } catch let error as LedgerStartupError {
                print("refused: \(error)")
                throw ExitCode(1)
            } catch { throw UsageError("cannot snapshot \(path): \(error)") }
            defer { snapshot.remove() }
            let database = snapshot.database
            let source = try await SQLiteLedger(database).audit(publicKey: key)
            guard source.intact else {
                print("refused: the source ledger does not verify:\n" + Verify.text(source))
                throw ExitCode(1)
            }
            do { try await snapshot.checkHighWater() } catch let error
                as LedgerStartupError
            {
                print("refused: \(error)")
                throw ExitCode(1)
            }
            let summary: LedgerCopy.Summary
            do {
                summary = try await DatabaseOption.with(toDatabase, migrate: true) { backend in
                    try await LedgerCopy.copy(from: database, to: backend, publicKey: key)
                }
            } catch let error as PostgresStoreError {
                throw UsageError("\(error)")
            }
            for (table, rows) in summary.counts { print("copied \(rows) \(table)") }
            print(Verify.text(summary.audit))
            if !summary.audit.intact || summary.audit.headHash != source.headHash { throw ExitCode(1) }
        }
    }

    struct PublicKey: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "public-key", abstract: "Print the checkpoint signing public key (PEM) of a data directory.")
        @Option(name: .customLong("data-dir"), help: "Data directory.") var dataDir = "coffer-data"
        @Option(name: .customLong("ledger-key"), help: "The signing key file, when it lives outside the data directory.") var ledgerKey: String?

        func run() async throws {
            let signer = try LedgerKeyFile.resolve(dataDirectory: dataDir, configured: ledgerKey, create: false).signer
            print(try LedgerKeys.pem(signer.publicKey), terminator: "")
        }
    }

    struct Adopt: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Chain the rows no ledger event chains, as a recorded admin action (upgrades from older Coffer databases).",
            discussion: """
                The server refuses to start while the database holds rows outside the hash chain: rows from a \
                Coffer older than the chain (or admin-log rows from before migration 0003) — or rows inserted \
                behind its back. Run `coffer ledger verify` first and read what it names. Adopting chains every \
                such row, oldest first, and appends a `ledger.adopt` admin action naming how many of each kind \
                and who ran it: auditors see the adoption in the chain (`coffer ledger verify` lists every one). \
                It also logs what the admin log lacks to back the catalogue as it stands (products and asset \
                versions from before Coffer logged every catalogue change, or changed behind its back: `coffer \
                ledger verify` names each), printing every one. A chain that does not end where the server's key sealed it (entries appended or removed behind \
                its back, a seal by another key) is refused unless --reseal: then the old seal and the re-sealed \
                range are recorded too. Stop the server first.
                """)
        @Option(name: .customLong("data-dir"), help: "Data directory.") var dataDir = "coffer-data"
        @Option(name: .customLong("ledger-key"), help: "The signing key file, when it lives outside the data directory.") var ledgerKey: String?
        @Flag(help: "Also seal a chain whose seal is broken (recording the old seal and the range).") var reseal = false
        @Option(
            help: ArgumentHelp(
                DatabaseOption.help
                    + " There only the catalogue is adopted (a PostgreSQL ledger is chained from its first row); the data directory (or --ledger-key) holds the key."
            ))
        var database: String?

        func run() async throws {
            if let database { return try await adoptCatalogue(database) }
            let path = DataDirectory(dataDir).database
            guard FileManager.default.fileExists(atPath: path) else { throw UsageError("no database at \(path)") }
            let signer: LedgerSigner
            do { signer = try LedgerKeyFile.resolve(dataDirectory: dataDir, configured: ledgerKey, create: false).signer } catch {
                throw UsageError("\(error): pass the server's key with --ledger-key")
            }
            let ledger = SQLiteLedger(try IO.currentDatabase(path), checkpoints: CheckpointPolicy(signer: signer))
            let adoption: SQLiteLedger.Adoption
            do {
                adoption = try await ledger.adopt(
                    by: KeysCommand.localAction(.ledgerAdopt, target: "ledger", detail: ""), now: Date(), reseal: reseal)
            } catch let error as LedgerIntegrityError {
                print("refused: \(error). If you vouch for every entry as it stands, run again with --reseal (it is recorded).")
                throw ExitCode(1)
            }
            try await ledger.checkpointHead(now: Date())
            Self.report(adoption.catalogue, adoption.action)
        }

        /// `--database`: the catalogue's rows the admin log does not back, logged.
        func adoptCatalogue(_ database: String) async throws {
            guard !reseal else { throw UsageError("--reseal is for a data directory's SQLite ledger; a PostgreSQL seal is never re-sealed here") }
            let signer: LedgerSigner
            do { signer = try LedgerKeyFile.resolve(dataDirectory: dataDir, configured: ledgerKey, create: false).signer } catch {
                throw UsageError("\(error): pass the server's key with --ledger-key (or its data directory with --data-dir)")
            }
            let actor = KeysCommand.localAction(.ledgerAdopt, target: "ledger", detail: "")
            let adoption: (catalogue: [CatalogueFinding], action: AdminAction)?
            do {
                adoption = try await DatabaseOption.with(database) { backend in
                    // The admin log is replayed from its rows: only when the chain vouches for them.
                    let report = try await PostgresLedger(backend).audit(publicKey: signer.publicKey)
                    if let problem = report.problem, problem.kind != .catalogueUnbacked {
                        print("refused: the chain itself does not verify, so its admin log cannot back the catalogue:\n" + Verify.text(report))
                        return nil
                    }
                    return try await PostgresLedger(backend, checkpoints: CheckpointPolicy(signer: signer)).adoptCatalogue(by: actor)
                }
            } catch let error as LedgerIntegrityError {
                print("refused: \(error)")
                throw ExitCode(1)
            }
            guard let adoption else { throw ExitCode(1) }
            Self.report(adoption.catalogue, adoption.action)
        }

        /// Prints each catalogue row vouched for (or left), then the adoption's entry.
        static func report(_ catalogue: [CatalogueFinding], _ action: AdminAction) {
            for finding in catalogue {
                print(finding.kind == .productUnreadable ? "not vouched for (mend or delete the row): \(finding)" : "vouched for: \(finding)")
            }
            print("\(action.detail); recorded as admin action \(action.sequence)")
        }
    }

    struct Keygen: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a ledger signing key file to keep outside the data directory (serve --ledger-key FILE).")
        @Option(help: "Where to write the key (0600; never overwritten).") var out: String

        func run() async throws {
            let signer: LedgerSigner
            do { signer = try LedgerKeyFile.create(at: out) } catch { throw UsageError("\(error)") }
            print(try LedgerKeys.pem(signer.publicKey), terminator: "")
        }
    }
}
