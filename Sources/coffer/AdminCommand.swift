import ArgumentParser
import CofferClient
import CofferCore
import Foundation

/// `coffer admin …`: the admin API of a running server, with an admin key.
struct AdminCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "admin",
        abstract: "Manage a running server's catalogue: upload assets, put products, revoke, sync a release.",
        discussion: """
            Talks to --server (or COFFER_SERVER) with an admin key from COFFER_KEY or --key-file. Exit 0 when \
            done, 1 when the server refused (its problem code is printed), 2 on usage errors or when the \
            server cannot be reached.
            """,
        subcommands: [Assets.self, Products.self, Revocations.self, Sync.self])

    struct Assets: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Upload and list assets.", subcommands: [Upload.self, List.self])

        struct Upload: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Upload files, each as a new version of an asset (SHA-256 sent as Content-Digest).",
                discussion: """
                    The asset id is the file's name (characters other than A–Z a–z 0–9 . _ - become -) unless \
                    --id is given (one file only). A progress bar shows on a terminal. A busy server (503 \
                    uploadsBusy) is retried after its Retry-After.
                    """)
            @OptionGroup var client: ClientOptions
            @Argument(help: "The files to upload.") var files: [String]
            @Option(help: "The asset id (with one file).") var id: String?
            @Option(name: .customLong("content-type"), help: "The media type (default: the server's choice for the file name's extension).")
            var contentType: String?
            @OptionGroup var output: OutputOptions

            func validate() throws {
                guard !files.isEmpty else { throw ValidationError("name at least one file") }
                if id != nil, files.count > 1 { throw ValidationError("--id takes one file") }
            }

            func run() async throws {
                var uploaded: [Asset] = []
                for file in files {
                    try ContentSync.requireRegularFile(file)
                    let (digest, size) = try ContentSync.sha256(file: file)
                    let name = (file as NSString).lastPathComponent
                    let assetId = id ?? Self.assetId(fileName: name)
                    let progress = Progress(label: assetId, total: size)
                    let asset = try await client.run { api in
                        try await api.upload(
                            file: file, assetId: assetId, name: name, contentType: contentType, sha256: digest, size: size,
                            progress: { progress.update($0) })
                    }
                    progress.finish()
                    uploaded.append(asset)
                }
                if output.asJSON {
                    print(Terminal.safeJSON(String(decoding: try CofferAPIClient.encode(uploaded), as: UTF8.self)))
                } else {
                    for a in uploaded { print(Terminal.safe("\(a.assetId) version \(a.version): \(a.name), \(a.size) bytes, sha256 \(a.sha256)")) }
                }
            }

            static func assetId(fileName: String) -> String {
                String(
                    String.UnicodeScalarView(
                        fileName.unicodeScalars.map { s in
                            s.isASCII && (s.properties.isAlphabetic || ("0"..."9").contains(s) || "._-".unicodeScalars.contains(s)) ? s : "-"
                        }
                    ).prefix(128))
            }
        }

        struct List: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "List the latest version of every asset.")
            @OptionGroup var client: ClientOptions
            @OptionGroup var output: OutputOptions

            func run() async throws {
                let data = try await client.run { try await $0.call(.GET, "/v1/admin/assets") }
                try AuditCommand.show(
                    data, output: output,
                    columns: [
                        ("ASSET", "assetId"), ("VERSION", "version"), ("NAME", "name"), ("SIZE", "size"), ("TYPE", "contentType"),
                        ("CREATED", "createdAt"), ("SHA-256", "sha256"),
                    ])
            }
        }
    }

    struct Products: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Put, list and delete products.", subcommands: [Put.self, List.self, Delete.self])

        struct Put: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Create or replace a product.")
            @OptionGroup var client: ClientOptions
            @Argument(help: "The App Store product id.") var productId: String
            @Option(name: .customLong("bundle-id"), help: "The app's bundle id.") var bundleId: String
            @Option(help: "consumable, nonConsumable, autoRenewable or nonRenewing.") var type: String
            @Option(help: "The title shown to admins and auditors.") var title: String
            @Option(name: .customLong("asset"), help: "An asset it unlocks (repeatable).") var assets: [String] = []
            @Flag(name: .customLong("family-shareable"), help: "A family member's shared copy unlocks it.") var familyShareable = false
            @Option(name: .customLong("duration-seconds"), help: "A nonRenewing product's length.") var durationSeconds: Int64?
            @OptionGroup var output: OutputOptions

            func run() async throws {
                guard let productType = ProductType(rawValue: type) else {
                    throw UsageError("--type \(type): expected \(ProductType.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                let spec = ProductSpec(
                    productId: productId, bundleId: bundleId, type: productType, title: title, assetIds: assets, familyShareable: familyShareable,
                    durationSeconds: durationSeconds)
                try await client.run { api in try await APICatalogueTarget(client: api, progress: { _, _ in { _ in } }).put(spec) }
                print(output.asJSON ? "{\"productId\":\(try Table.json(productId)),\"result\":\"saved\"}" : "product \(productId) saved")
            }
        }

        struct List: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "List the products.")
            @OptionGroup var client: ClientOptions
            @OptionGroup var output: OutputOptions

            func run() async throws {
                let data = try await client.run { try await $0.call(.GET, "/v1/admin/products") }
                try AuditCommand.show(
                    data, output: output,
                    columns: [
                        ("PRODUCT", "productId"), ("TYPE", "type"), ("BUNDLE", "bundleId"), ("TITLE", "title"), ("ASSETS", "assetIds"),
                        ("UPDATED", "updatedAt"),
                    ])
            }
        }

        struct Delete: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Delete a product (its redemptions stay in the ledger; new redemptions get 404 unknownProduct).")
            @OptionGroup var client: ClientOptions
            @Argument(help: "The product id.") var productId: String

            func run() async throws {
                _ = try await client.run { try await $0.call(.DELETE, "/v1/admin/products/" + (try Identifier.segment(productId, "product"))) }
                print("product \(productId) deleted")
            }
        }
    }

    struct Revocations: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke redeemed purchases.", subcommands: [Create.self])

        struct Create: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Revoke a redeemed purchase (a chargeback, abuse): its grant and tokens stop working.")
            @OptionGroup var client: ClientOptions
            @Option(name: .customLong("transaction-id"), help: "The redeemed transaction.") var transactionId: String
            @Option(help: "Why (kept in the ledger).") var reason: String
            @Option(help: "Production, Sandbox, Xcode or LocalTesting: only when the id was redeemed in several.") var environment: String?
            @OptionGroup var output: OutputOptions

            func run() async throws {
                struct Body: Encodable {
                    var transactionId: String
                    var reason: String
                    var environment: String?
                }
                let data = try await client.run {
                    try await $0.call(
                        .POST, "/v1/admin/revocations", json: Body(transactionId: transactionId, reason: reason, environment: environment))
                }
                if output.asJSON {
                    print(Terminal.safeJSON(String(decoding: data, as: UTF8.self)))
                } else {
                    let (items, _) = try Table.page(Data("[".utf8) + data + Data("]".utf8))
                    print(
                        Table.render(
                            items, columns: [("SEQUENCE", "sequence"), ("TRANSACTION", "transactionId"), ("AT", "at"), ("REASON", "reason")]))
                }
            }
        }
    }

    struct Sync: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Publish a release directory (manifest.json + files, the content/ format): upload what changed, put products.",
            discussion: """
                Files are compared by SHA-256 with the server's latest versions: only new or changed ones are \
                uploaded. Products are put when they differ. Products the release does not list are deleted \
                only with --prune; assets are never deleted. --dry-run prints the plan and changes nothing.
                """)
        @OptionGroup var client: ClientOptions
        @Argument(help: "The release directory (holding manifest.json).") var directory: String
        @Flag(name: .customLong("dry-run"), help: "Print the plan as a diff; change nothing.") var dryRun = false
        @Flag(help: "Delete products the release does not list.") var prune = false

        func run() async throws {
            let manifest: ReleaseManifest
            do { manifest = try ReleaseManifest.load(directory: directory) } catch let error as ClientError { throw UsageError("\(error)") }
            try await client.run { api in
                let target = APICatalogueTarget(client: api) { assetId, size in
                    let progress = Progress(label: assetId, total: size)
                    return { bytes in
                        progress.update(bytes)
                        if bytes == size { progress.finish() }
                    }
                }
                let plan = try await ContentSync.plan(manifest, directory: directory, target: target, prune: prune)
                for line in plan.diff() { print(line) }
                guard !dryRun, !plan.isEmpty else {
                    if dryRun { print("dry run: nothing changed") }
                    return
                }
                try await ContentSync.apply(plan, target: target) { print($0) }
                print("release \(directory) published")
            }
        }
    }
}
