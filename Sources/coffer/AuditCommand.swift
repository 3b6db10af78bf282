import ArgumentParser
import CofferClient
import CofferCore
import Crypto
import Foundation

/// `coffer audit …`: the audit API of a running server, with an auditor (or admin) key.
struct AuditCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "audit",
        abstract: "Query, export and verify a running server's ledger.",
        discussion: """
            Talks to --server (or COFFER_SERVER) with an auditor or admin key from COFFER_KEY or --key-file. \
            Exit 0 when done (verify: intact), 1 when the server refused or the ledger is not intact, 2 on \
            usage errors or when the server cannot be reached.
            """,
        subcommands: [Redemptions.self, Attempts.self, Revocations.self, Export.self, Verify.self])

    /// The API's ledger filters.
    struct Filters: ParsableArguments {
        @Option(name: .customLong("transaction-id")) var transactionId: String?
        @Option(name: .customLong("original-transaction-id")) var originalTransactionId: String?
        @Option(name: .customLong("product-id")) var productId: String?
        @Option(name: .customLong("bundle-id")) var bundleId: String?
        @Option(name: .customLong("player-id")) var playerId: String?
        @Option(help: "Refusal code (attempts).") var code: String?
        @Option(help: "From this time (ISO 8601).") var from: String?
        @Option(help: "Up to this time (ISO 8601).") var to: String?

        var query: [(String, String)] {
            [
                ("transactionId", transactionId), ("originalTransactionId", originalTransactionId), ("productId", productId),
                ("bundleId", bundleId), ("playerId", playerId), ("code", code), ("from", from), ("to", to),
            ].compactMap { name, value in value.map { (name, $0) } }
        }
    }

    /// Page options: one page from `--cursor`, or every page with `--all`.
    struct Paging: ParsableArguments {
        @Option(help: "Rows per page, 1–1000.") var limit: Int?
        @Option(help: "Continue after this cursor (a previous page's nextCursor).") var cursor: String?
        @Flag(help: "Follow every page to the end.") var all = false
    }

    /// Fetches one page or all, then prints them (the table ends with the next cursor).
    static func list(
        _ path: String, query: [(String, String)], paging: Paging, client: ClientOptions, output: OutputOptions,
        columns: [(header: String, key: String)]
    ) async throws {
        let base = query + (paging.limit.map { [("limit", String($0))] } ?? [])
        let (items, next) = try await client.run { api -> ([JSONValue], String?) in
            var items: [JSONValue] = []
            var cursor = paging.cursor
            while true {
                let page = try Table.page(try await api.call(.GET, path, query: base + (cursor.map { [("cursor", $0)] } ?? [])))
                items += page.items
                guard paging.all, let next = page.next else { return (items, page.next) }
                try Self.advance(from: cursor, to: next)
                cursor = next
            }
        }
        if output.asJSON {
            struct Page: Encodable {
                var items: [JSONValue]
                var nextCursor: String?
            }
            print(try Table.json(Page(items: items, nextCursor: next)))
        } else {
            print(Table.render(items, columns: columns))
            if let next { print("more: --cursor \(next) (or --all)") }
        }
    }

    /// Cursors only move forward: a server that repeats one (or goes back) would page forever.
    static func advance(from previous: String?, to next: String) throws {
        guard let n = UInt64(next), previous.flatMap(UInt64.init).map({ n > $0 }) ?? true else {
            throw ClientError.transport("the server's nextCursor \(next) does not move forward: stopped")
        }
    }

    /// A new file for this process only (0600, never an existing file or link): an export's partial file.
    static func createExclusive(_ path: String) throws -> FileHandle {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw UsageError("cannot create \(path): \(String(cString: strerror(errno)))") }
        return FileHandle(fileDescriptor: fd, closeOnDealloc: true)
    }

    /// Prints a JSON answer (a list) as JSON or a table.
    static func show(_ data: Data, output: OutputOptions, columns: [(header: String, key: String)]) throws {
        if output.asJSON {
            print(Terminal.safeJSON(String(decoding: data, as: UTF8.self)))
        } else {
            print(Table.render(try Table.page(data).items, columns: columns))
        }
    }

    struct Redemptions: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List redemptions (filters as GET /v1/audit/redemptions).")
        @OptionGroup var client: ClientOptions
        @OptionGroup var filters: Filters
        @OptionGroup var paging: Paging
        @OptionGroup var output: OutputOptions

        func run() async throws {
            try await AuditCommand.list(
                "/v1/audit/redemptions", query: filters.query, paging: paging, client: client, output: output,
                columns: [
                    ("SEQ", "sequence"), ("REDEEMED", "redeemedAt"), ("TRANSACTION", "transactionId"), ("ORIGINAL", "originalTransactionId"),
                    ("PRODUCT", "productId"), ("ENVIRONMENT", "environment"), ("PLAYER", "playerId"), ("CLIENT", "clientAddress"),
                ])
        }
    }

    struct Attempts: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List refused attempts (filters as GET /v1/audit/attempts).")
        @OptionGroup var client: ClientOptions
        @OptionGroup var filters: Filters
        @OptionGroup var paging: Paging
        @OptionGroup var output: OutputOptions

        func run() async throws {
            try await AuditCommand.list(
                "/v1/audit/attempts", query: filters.query, paging: paging, client: client, output: output,
                columns: [
                    ("SEQ", "sequence"), ("AT", "at"), ("CODE", "code"), ("TRANSACTION", "transactionId"), ("PRODUCT", "productId"),
                    ("CLIENT", "clientAddress"), ("DETAIL", "detail"),
                ])
        }
    }

    struct Revocations: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List revocations (refunds, revokes, admin revocations).")
        @OptionGroup var client: ClientOptions
        @OptionGroup var paging: Paging
        @OptionGroup var output: OutputOptions

        func run() async throws {
            try await AuditCommand.list(
                "/v1/audit/revocations", query: [], paging: paging, client: client, output: output,
                columns: [
                    ("SEQ", "sequence"), ("AT", "at"), ("TRANSACTION", "transactionId"), ("REDEMPTION", "redemptionId"), ("SOURCE", "source"),
                    ("REASON", "reason"),
                ])
        }
    }

    struct Export: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Download an export (GET /v1/audit/export) to a file, with progress.",
            discussion: "The file is written beside --out and renamed into place when complete: a failed export leaves no partial file.")
        @OptionGroup var client: ClientOptions
        @Option(help: "The file to write.") var out: String
        @Option(help: "ndjson or csv.") var format = "ndjson"
        @Option(help: "redemptions, attempts, deliveries or ledger (the chained export).") var kind = "redemptions"
        @OptionGroup var filters: Filters

        func run() async throws {
            let temporary = out + ".partial-\(UUID().uuidString)"
            let handle = try AuditCommand.createExclusive(temporary)
            let progress = Progress(label: "export", total: nil)
            do {
                let bytes = try await client.run { api in
                    try await api.download(
                        "/v1/audit/export", query: [("format", format), ("kind", kind)] + filters.query, progress: { progress.update($0) }
                    ) { try handle.write(contentsOf: Data(buffer: $0)) }
                }
                try handle.synchronize()
                try handle.close()
                progress.finish()
                guard rename(temporary, out) == 0 else { throw UsageError("cannot rename \(temporary) to \(out)") }
                print("\(out): \(bytes) bytes")
            } catch {
                try? handle.close()
                unlink(temporary)
                throw error
            }
        }
    }

    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Fetch the chained export and the checkpoints, and verify them offline against a pinned public key.",
            discussion: """
                The key is yours, obtained once and kept apart from the server (GET /v1/audit/public-key, or \
                coffer ledger public-key on the server's host). Every checkpoint the server publishes must \
                verify with it and be extended by the ledger; --checkpoint adds checkpoints you saved earlier, \
                so a rewritten, truncated or re-signed history fails. Exit 0 intact, 1 not intact.
                """)
        @OptionGroup var client: ClientOptions
        @Option(
            name: .customLong("public-key"), help: "The pinned checkpoint key: a file (PEM, base64 or the JSON of /v1/audit/public-key) or base64.")
        var publicKey: String
        @Option(name: .customLong("checkpoint"), help: "A file of checkpoints saved earlier. Repeatable.") var checkpoints: [String] = []
        @Flag(help: "Print the report as JSON.") var json = false

        func run() async throws {
            let key = try LedgerCommand.Verify.loadKey(publicKey)
            var pinned: [LedgerCheckpoint] = []
            for file in checkpoints {
                guard let saved = LedgerCheckpoint.saved(Data(try IO.read(file))) else {
                    throw UsageError("--checkpoint \(file): no checkpoint in it")
                }
                pinned += saved
            }
            // Checkpoints first, then the export: the export then extends every one of them.
            let (published, export) = try await client.run { api -> ([LedgerCheckpoint], Data) in
                var published: [LedgerCheckpoint] = []
                var cursor: String?
                repeat {
                    let data = try await api.call(
                        .GET, "/v1/audit/checkpoints", query: [("limit", "1000")] + (cursor.map { [("cursor", $0)] } ?? []))
                    let page = try Table.page(data)
                    if !page.items.isEmpty {
                        guard let saved = LedgerCheckpoint.saved(data) else { throw ClientError.transport("the checkpoints page is not checkpoints") }
                        published += saved
                    }
                    if let next = page.next { try AuditCommand.advance(from: cursor, to: next) }
                    cursor = page.next
                } while cursor != nil
                // Verified in memory, as `ledger verify --export` does: no copy of the ledger on disk.
                let progress = Progress(label: "ledger export", total: nil)
                var export = Data()
                _ = try await api.download("/v1/audit/export", query: [("kind", "ledger")], progress: { progress.update($0) }) {
                    export.append(contentsOf: $0.readableBytesView)
                }
                progress.finish()
                return (published, export)
            }
            let report = LedgerExport.verify(export, publicKey: key, pinned: pinned + published)
            // Consistent is not verified: a ledger that no checkpoint signed by the pinned key
            // covers (a server that publishes none, or strips them) proves nothing. (Its entries
            // are all after the last signature: `unsealed`, the export's rule for its end.)
            let unsigned =
                (report.intact || report.problem?.kind == .unsealed) && report.entries > 0 && report.checkpointsVerified + report.pinnedVerified == 0
            if json {
                print(Terminal.safeJSON(try LedgerCommand.Verify.json(report)))
            } else {
                print(
                    (unsigned ? "NOT VERIFIED: no checkpoint signed by the pinned key covers these \(report.entries) entries\n" : "")
                        + LedgerCommand.Verify.text(report) + "\nchecked against the pinned key \(LedgerSigner.keyId(key))")
            }
            if !report.intact || unsigned { throw ExitCode(1) }
        }
    }
}
