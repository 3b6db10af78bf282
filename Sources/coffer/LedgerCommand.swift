import ArgumentParser
import CofferCore
import CofferServer
import CofferStore
import Crypto
import Foundation

struct LedgerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ledger", abstract: "Prove the redemption ledger untampered.", subcommands: [Verify.self, Export.self, PublicKey.self])

    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check the hash chain and the signed checkpoints of a database or an export.",
            discussion: """
                Exit 0 when intact, 1 when not (the first bad sequence number is named), 2 on usage errors.
                With --data-dir the database is read while the server runs or not. Pass --public-key with
                the key you obtained earlier (GET /v1/audit/public-key, kept apart from the server):
                without it the key in the data directory or in the export is used, which shows only
                that the ledger is consistent with itself.
                """)
        @Option(name: .customLong("data-dir"), help: "Data directory to check.") var dataDir: String?
        @Option(help: "An export (GET /v1/audit/export?kind=ledger or coffer ledger export) to check offline.") var export: String?
        @Option(
            name: .customLong("public-key"), help: "The checkpoint public key: a file (PEM, base64 or the JSON of /v1/audit/public-key) or base64.")
        var publicKey: String?
        @Flag(help: "Print the report as JSON.") var json = false

        func run() async throws {
            let key = try publicKey.map(Self.loadKey)
            let report: LedgerAuditReport
            switch (dataDir, export) {
            case (let dir?, nil):
                let path = (dir as NSString).appendingPathComponent("coffer.sqlite")
                guard FileManager.default.fileExists(atPath: path) else { throw UsageError("no database at \(path)") }
                let trusted = try key ?? LedgerKeyFile.signer(dataDirectory: dir, create: false).publicKey
                report = try await SQLiteLedger(CofferDatabase(path: path)).audit(publicKey: trusted)
            case (nil, let file?):
                report = LedgerExport.verify(Data(try IO.read(file)), publicKey: key)
            default:
                throw UsageError("pass exactly one of --data-dir or --export")
            }
            print(json ? try Self.json(report) : Self.text(report))
            if !report.intact { throw ExitCode(1) }
        }

        static func loadKey(_ value: String) throws -> Curve25519.Signing.PublicKey {
            let text = FileManager.default.fileExists(atPath: value) ? String(decoding: try IO.read(value), as: UTF8.self) : value
            guard let key = LedgerKeys.parse(text) else { throw UsageError("--public-key: not an Ed25519 public key (PEM, base64 or JSON)") }
            return key
        }

        static func text(_ r: LedgerAuditReport) -> String {
            var lines = [
                r.intact ? "ledger intact" : "LEDGER TAMPERED",
                "entries: \(r.entries), last sequence \(r.lastSequence), head \(r.headHash)",
                "checkpoints verified: \(r.checkpointsVerified)\(r.lastCheckpoint.map { ", latest at \($0)" } ?? "")",
            ]
            if let p = r.problem {
                lines.append("problem: \(p.kind.rawValue)")
                if let s = p.sequence { lines.append("first bad sequence: \(s)") }
                lines.append("detail: \(p.detail)")
            }
            return lines.joined(separator: "\n")
        }

        static func json(_ r: LedgerAuditReport) throws -> String {
            var object: [String: Any] = [
                "intact": r.intact, "entries": r.entries, "lastSequence": r.lastSequence, "headHash": r.headHash,
                "checkpointsVerified": r.checkpointsVerified,
            ]
            object["lastCheckpoint"] = r.lastCheckpoint
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
        @Option(name: .customLong("data-dir"), help: "Data directory. Default: coffer-data.") var dataDir = "coffer-data"
        @Option(help: "Output file (default: standard output).") var out: String?

        func run() async throws {
            let path = (dataDir as NSString).appendingPathComponent("coffer.sqlite")
            guard FileManager.default.fileExists(atPath: path) else { throw UsageError("no database at \(path)") }
            let key = try LedgerKeyFile.signer(dataDirectory: dataDir, create: false).publicKey
            var text = ""
            try await SQLiteLedger(CofferDatabase(path: path)).export(publicKey: key, now: Date()) { text += $0 }
            try IO.output(Array(text.utf8), to: out)
        }
    }

    struct PublicKey: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "public-key", abstract: "Print the checkpoint signing public key (PEM) of a data directory.")
        @Option(name: .customLong("data-dir"), help: "Data directory. Default: coffer-data.") var dataDir = "coffer-data"

        func run() async throws {
            let signer = try LedgerKeyFile.signer(dataDirectory: dataDir, create: false)
            print(try LedgerKeys.pem(signer.publicKey), terminator: "")
        }
    }
}
