import CofferClient
import CofferCore
import CofferTestSupport
import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import NIOCore
import Synchronization
import Testing

/// `coffer admin` and `coffer audit` against the real `coffer serve --demo` process: what an
/// admin and an auditor type, with the key in the environment, output parsed as a script would.
@Suite(.serialized) struct ClientCLITests {
    /// A demo server in a temporary directory, with its two keys and a way to run the CLI at it.
    struct Demo {
        let root: URL
        let data: URL
        let server: CrashSafetyTests.Server
        let auditorKey: String
        var url: String { "http://127.0.0.1:\(server.port)" }

        static func start(_ arguments: [String] = []) async throws -> Demo {
            let root = try makeTemporaryDirectory(prefix: "coffer-client")
            let data = root.appendingPathComponent("data")
            let server = try await CrashSafetyTests.Server(dataDirectory: data, arguments: arguments)
            return Demo(root: root, data: data, server: server, auditorKey: try HardeningCLITests.printedAuditorKey(server))
        }

        /// Runs `body` with a started demo, stopped afterwards whatever happens.
        static func with(_ arguments: [String] = [], _ body: (Demo) async throws -> Void) async throws {
            let demo = try await start(arguments)
            do { try await body(demo) } catch {
                try? await demo.stop()
                throw error
            }
            try await demo.stop()
        }

        func stop() async throws {
            try await HardeningCLITests.stop(server)
            try? FileManager.default.removeItem(at: root)
        }

        /// Runs `coffer ARGS` with `key` in COFFER_KEY and this server in COFFER_SERVER.
        func run(_ arguments: [String], key: String?) async throws -> CofferExecutable.Run {
            var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("COFFER_") }
            environment["COFFER_SERVER"] = url
            if let key { environment["COFFER_KEY"] = key }
            return try await CofferExecutable.run(arguments, environment: environment)
        }

        /// Mints a sandbox receipt with the demo's CA and redeems it: its transaction id.
        func redeem(_ transactionId: String) async throws {
            let mint = try await CofferExecutable.run([
                "sandbox", "receipt", "--dir", data.appendingPathComponent("sandbox").path, "--bundle-id", "com.coffer.demo", "--purchase",
                "com.coffer.demo.levelpack1:\(transactionId)", "--base64",
            ])
            try #require(mint.status == 0, "\(mint.stderr)")
            let client = TestClient(host: "127.0.0.1", port: server.port, configuration: .init(timeout: .seconds(60)))
            client.connect()
            let body = "{\"receipt\":\"\(mint.stdout.trimmingCharacters(in: .whitespacesAndNewlines))\"}"
            let response = try await client.execute(
                .init("/v1/redemptions", method: .post, headers: [.contentType: "application/json"], body: ByteBuffer(string: body)))
            try await client.shutdown()
            try #require(response.status == .created)
        }
    }

    static func json(_ text: String) throws -> Any { try JSONSerialization.jsonObject(with: Data(text.utf8)) }

    static func items(_ text: String) throws -> [[String: Any]] {
        let object = try json(text)
        if let array = object as? [[String: Any]] { return array }
        return try #require((object as? [String: Any])?["items"] as? [[String: Any]], "not a page: \(text)")
    }

    @Test func adminUploadsListsPutsAndDeletes() async throws {
        try await Demo.with { demo in
            let key = demo.server.adminKey
            let file = demo.root.appendingPathComponent("map 1.bin")
            let bytes = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
            try Data(bytes).write(to: file)

            // Not a terminal: plain progress lines on stderr, the asset as JSON on stdout.
            let upload = try await demo.run(["admin", "assets", "upload", file.path], key: key)
            #expect(upload.status == 0, "\(upload.stderr)")
            #expect(upload.stderr.contains("100%"), "progress reaches 100%: \(upload.stderr)")
            let asset = try #require(try Self.items(upload.stdout).first)
            #expect(asset["assetId"] as? String == "map-1.bin", "the id is the file name, spaces replaced")
            #expect(asset["name"] as? String == "map 1.bin")
            #expect(asset["sha256"] as? String == Hex.encode(Array(SHA256Digest.of(bytes))))
            #expect(asset["contentType"] as? String == "application/octet-stream")

            // Again with another id: a new asset; the same id again: version 2, name kept.
            #expect(try await demo.run(["admin", "assets", "upload", file.path, "--id", "map.one"], key: key).status == 0)
            let again = try await demo.run(["admin", "assets", "upload", file.path, "--id", "map.one"], key: key)
            #expect(try Self.items(again.stdout).first?["version"] as? Int == 2)

            let list = try await demo.run(["admin", "assets", "list", "--json"], key: key)
            #expect(try Self.items(list.stdout).contains { $0["assetId"] as? String == "map.one" && $0["version"] as? Int == 2 })
            let table = try await demo.run(["admin", "assets", "list", "--table"], key: key)
            #expect(table.stdout.hasPrefix("ASSET"), "a table with a header: \(table.stdout)")
            #expect(table.stdout.contains("map.one"))

            let put = try await demo.run(
                [
                    "admin", "products", "put", "com.coffer.demo.maps", "--bundle-id", "com.coffer.demo", "--type", "nonConsumable", "--title",
                    "Maps",
                    "--asset", "map.one",
                ], key: key)
            #expect(put.status == 0, "\(put.stderr)")
            let products = try await demo.run(["admin", "products", "list", "--json"], key: key)
            let maps = try #require(try Self.items(products.stdout).first { $0["productId"] as? String == "com.coffer.demo.maps" })
            #expect(maps["assetIds"] as? [String] == ["map.one"])

            // A product of an app the server does not verify: refused, one line with the code, exit 1.
            let foreign = try await demo.run(
                ["admin", "products", "put", "com.other.maps", "--bundle-id", "com.other", "--type", "nonConsumable", "--title", "X"], key: key)
            #expect(foreign.status == 1)
            #expect(foreign.stderr.contains("422 bundleMismatch"), "\(foreign.stderr)")
            #expect(foreign.stderr.split(separator: "\n").count == 1)

            #expect(try await demo.run(["admin", "products", "delete", "com.coffer.demo.maps"], key: key).status == 0)
            let gone = try await demo.run(["admin", "products", "delete", "com.coffer.demo.maps"], key: key)
            #expect(gone.status == 1)
            #expect(gone.stderr.contains("404 unknownProduct"), "\(gone.stderr)")

            // Revocations: an unknown transaction is refused with its code; a redeemed one is revoked.
            let unknown = try await demo.run(["admin", "revocations", "create", "--transaction-id", "999", "--reason", "test"], key: key)
            #expect(unknown.status == 1)
            #expect(unknown.stderr.contains("404 notRedeemed"), "\(unknown.stderr)")
            try await demo.redeem("424242")
            let revoke = try await demo.run(["admin", "revocations", "create", "--transaction-id", "424242", "--reason", "chargeback"], key: key)
            #expect(revoke.status == 0, "\(revoke.stderr)")
            #expect(try (Self.json(revoke.stdout) as? [String: Any])?["transactionId"] as? String == "424242")
            // The auditor sees it.
            let revocations = try await demo.run(["audit", "revocations", "--json"], key: demo.auditorKey)
            #expect(try Self.items(revocations.stdout).map { $0["transactionId"] as? String } == ["424242"])
            let revocationTable = try await demo.run(["audit", "revocations", "--table"], key: demo.auditorKey)
            #expect(revocationTable.stdout.hasPrefix("SEQ") && revocationTable.stdout.contains("chargeback"))
        }
    }

    @Test func keysComeFromTheEnvironmentOrAFileAndRefusalsAreOneLine() async throws {
        try await Demo.with { demo in
            // No key: a usage error that says where a key comes from; nothing is sent.
            let none = try await demo.run(["admin", "assets", "list"], key: nil)
            #expect(none.status == 2)
            #expect(none.stderr.contains("COFFER_KEY") && none.stderr.contains("--key-file"), "\(none.stderr)")
            // There is no flag that takes the key itself.
            #expect(try await demo.run(["admin", "assets", "list", "--key", demo.server.adminKey], key: nil).status != 0)
            // From a file.
            let keyFile = demo.root.appendingPathComponent("admin.key")
            try Data((demo.server.adminKey + "\n").utf8).write(to: keyFile)
            #expect(try await demo.run(["admin", "assets", "list", "--key-file", keyFile.path], key: nil).status == 0)
            // An auditor key on an admin route: 403, one line, exit 1.
            let forbidden = try await demo.run(["admin", "assets", "list"], key: demo.auditorKey)
            #expect(forbidden.status == 1)
            #expect(forbidden.stderr == "coffer: 403 forbidden: an auditor key may not do this\n")
            // A wrong key: 401.
            let wrong = try await demo.run(["audit", "redemptions"], key: "cof_admin_wrong")
            #expect(wrong.status == 1)
            #expect(wrong.stderr.contains("401 unauthenticated"), "\(wrong.stderr)")
            // Nobody listening: exit 2.
            var environment = ProcessInfo.processInfo.environment
            environment["COFFER_KEY"] = demo.server.adminKey
            let closed = try await CofferExecutable.run(["admin", "assets", "list", "--server", "http://127.0.0.1:1"], environment: environment)
            #expect(closed.status == 2)
            #expect(closed.stderr.hasPrefix("coffer: http://127.0.0.1:1 did not answer"), "\(closed.stderr)")
        }
    }

    @Test func syncUploadsOnlyWhatChangedAndDeletesOnlyWithPrune() async throws {
        try await Demo.with { demo in
            let key = demo.server.adminKey
            // The release is the demo's own content/: the demo loaded it through the same plan.
            let release = demo.root.appendingPathComponent("release")
            try FileManager.default.copyItem(at: CrashSafetyTests.Server.contentDirectory, to: release)
            let same = try await demo.run(["admin", "sync", release.path], key: key)
            #expect(same.status == 0, "\(same.stderr)")
            #expect(same.stdout.contains("plan: 0 uploads, 0 product changes, 0 deletions; unchanged: 4 assets, 3 products"), "\(same.stdout)")

            // One file changed, one title changed, one product the release does not list.
            try Data("# wall\n. floor\n~ water\n".utf8).write(to: release.appendingPathComponent("levelpack1/tiles.txt"))
            let manifestURL = release.appendingPathComponent("manifest.json")
            var manifest = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: manifestURL)) as? [String: Any])
            var products = try #require(manifest["products"] as? [[String: Any]])
            products[1]["title"] = "Level Pack 2: Sky Gardens (remastered)"
            manifest["products"] = products
            try JSONSerialization.data(withJSONObject: manifest).write(to: manifestURL)
            #expect(
                try await demo.run(
                    [
                        "admin", "products", "put", "com.coffer.demo.extra", "--bundle-id", "com.coffer.demo", "--type", "consumable", "--title",
                        "Extra",
                    ],
                    key: key
                ).status == 0)

            let dry = try await demo.run(["admin", "sync", release.path, "--dry-run"], key: key)
            #expect(dry.status == 0, "\(dry.stderr)")
            let plan = dry.stdout.split(separator: "\n").map(String.init)
            #expect(plan.contains { $0.hasPrefix("~ asset levelpack1-tiles  sha256 ") })
            #expect(
                plan.contains(
                    "~ product com.coffer.demo.levelpack2  title: \"Level Pack 2: Sky Gardens\" → \"Level Pack 2: Sky Gardens (remastered)\""))
            #expect(plan.contains("  product com.coffer.demo.extra is not in the release (kept; --prune deletes it)"))
            #expect(plan.contains("dry run: nothing changed"))
            let before = try Self.items(try await demo.run(["admin", "assets", "list", "--json"], key: key).stdout)
            #expect(before.first { $0["assetId"] as? String == "levelpack1-tiles" }?["version"] as? Int == 1, "a dry run uploads nothing")

            let sync = try await demo.run(["admin", "sync", release.path], key: key)
            #expect(sync.status == 0, "\(sync.stderr)")
            #expect(sync.stdout.contains("plan: 1 upload, 1 product change, 0 deletions; unchanged: 3 assets, 2 products"), "\(sync.stdout)")
            let after = try Self.items(try await demo.run(["admin", "assets", "list", "--json"], key: key).stdout)
            #expect(after.first { $0["assetId"] as? String == "levelpack1-tiles" }?["version"] as? Int == 2)
            #expect(after.first { $0["assetId"] as? String == "levelpack1-levels" }?["version"] as? Int == 1, "unchanged files are not uploaded")
            var listed = try Self.items(try await demo.run(["admin", "products", "list", "--json"], key: key).stdout)
            #expect(listed.contains { $0["productId"] as? String == "com.coffer.demo.extra" }, "kept without --prune")

            let prune = try await demo.run(["admin", "sync", release.path, "--prune"], key: key)
            #expect(prune.stdout.contains("- product com.coffer.demo.extra"), "\(prune.stdout)")
            listed = try Self.items(try await demo.run(["admin", "products", "list", "--json"], key: key).stdout)
            #expect(!listed.contains { $0["productId"] as? String == "com.coffer.demo.extra" })
            #expect(listed.count == 3)

            // A manifest naming a file outside the release is refused before anything is sent.
            manifest["assets"] = [["assetId": "x", "file": "../secret"]]
            try JSONSerialization.data(withJSONObject: manifest).write(to: manifestURL)
            let escape = try await demo.run(["admin", "sync", release.path, "--dry-run"], key: key)
            #expect(escape.status == 2)
            #expect(escape.stderr.contains("file must be a relative path inside the directory"), "\(escape.stderr)")
        }
    }

    @Test func auditorListsExportsAndVerifiesAgainstAPinnedKey() async throws {
        try await Demo.with(["--checkpoint-interval", "1"]) { demo in
            try await demo.redeem("5550001")
            try await demo.redeem("5550002")
            let key = demo.auditorKey

            let one = try await demo.run(["audit", "redemptions", "--transaction-id", "5550002", "--json"], key: key)
            #expect(one.status == 0, "\(one.stderr)")
            #expect(try Self.items(one.stdout).map { $0["transactionId"] as? String } == ["5550002"])
            let paged = try await demo.run(["audit", "redemptions", "--limit", "1", "--table"], key: key)
            #expect(paged.stdout.hasPrefix("SEQ"))
            #expect(paged.stdout.contains("more: --cursor 1 (or --all)"), "\(paged.stdout)")
            let all = try await demo.run(["audit", "redemptions", "--limit", "1", "--all", "--json"], key: key)
            #expect(try Self.items(all.stdout).count == 2)
            let bad = try await demo.run(["audit", "attempts", "--from", "yesterday"], key: key)
            #expect(bad.status == 1)
            #expect(bad.stderr == "coffer: 400 malformedRequest: from must be an ISO 8601 date\n")

            let csv = demo.root.appendingPathComponent("redemptions.csv")
            let export = try await demo.run(["audit", "export", "--out", csv.path, "--format", "csv"], key: key)
            #expect(export.status == 0, "\(export.stderr)")
            #expect(export.stderr.contains("export ") && export.stderr.contains("done in"), "progress on stderr: \(export.stderr)")
            let text = try String(contentsOf: csv, encoding: .utf8)
            #expect(text.hasPrefix("sequence,redemptionId,transactionId,"))
            #expect(text.contains("\"5550001\"") && text.contains("\"5550002\""))
            #expect(try FileManager.default.contentsOfDirectory(atPath: demo.root.path).allSatisfy { !$0.contains(".partial-") })

            // Verify once a checkpoint covers both redemptions (signed every second here).
            try await Self.waitForCheckpoint(demo, atLeast: 2)
            // Verify: the key pinned from /v1/audit/public-key (saved by the auditor) → intact.
            let data = try await demo.run(["ledger", "public-key", "--data-dir", demo.data.path], key: nil)
            let pinned = demo.root.appendingPathComponent("ledger.pub")
            try Data(data.stdout.utf8).write(to: pinned)
            let verify = try await demo.run(["audit", "verify", "--public-key", pinned.path], key: key)
            #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
            #expect(verify.stdout.hasPrefix("ledger intact"))
            // Another key (a server that re-signed its history would show this): not intact, exit 1.
            let other = Curve25519PublicKeyText.random()
            let wrong = try await demo.run(["audit", "verify", "--public-key", other], key: key)
            #expect(wrong.status == 1)
            #expect(wrong.stdout.hasPrefix("LEDGER TAMPERED"))
            // The pinned key is required.
            #expect(try await demo.run(["audit", "verify"], key: key).status == 2)
        }
    }

    /// Polls /v1/audit/checkpoints/latest until it covers `sequence` (at most 30 s).
    static func waitForCheckpoint(_ demo: Demo, atLeast sequence: Int) async throws {
        for _ in 0..<300 {
            let client = TestClient(host: "127.0.0.1", port: demo.server.port, configuration: .init(timeout: .seconds(60)))
            client.connect()
            let response = try await client.execute(
                .init("/v1/audit/checkpoints/latest", method: .get, headers: [.authorization: "Bearer \(demo.auditorKey)"]))
            try await client.shutdown()
            if response.status == .ok,
                let body = try? JSONSerialization.jsonObject(with: Data(buffer: response.body ?? ByteBuffer())) as? [String: Any],
                (body["sequence"] as? Int ?? 0) >= sequence
            {
                return
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        Issue.record("no checkpoint covered sequence \(sequence) within 30 s")
    }

    /// A ledger no checkpoint covers is consistent but unverified: `audit verify` says so and
    /// exits 1. The server here is a fake that serves the real ledger's export with its
    /// checkpoints stripped and publishes none (a server hiding a rewrite would).
    @Test func verifyRefusesALedgerNoCheckpointCovers() async throws {
        try await Demo.with { demo in
            try await demo.redeem("7770001")
            let pinned = demo.root.appendingPathComponent("ledger.pub")
            try Data(try await demo.run(["ledger", "public-key", "--data-dir", demo.data.path], key: nil).stdout.utf8).write(to: pinned)
            let exported = demo.root.appendingPathComponent("ledger.ndjson")
            #expect(try await demo.run(["audit", "export", "--kind", "ledger", "--out", exported.path], key: demo.auditorKey).status == 0)
            let stripped =
                try String(contentsOf: exported, encoding: .utf8).split(separator: "\n").filter { !$0.hasPrefix(#"{"checkpoint""#) }
                .joined(separator: "\n") + "\n"
            #expect(!stripped.contains(#""checkpoint""#))
            let router = Router()
            router.get("/v1/audit/checkpoints") { _, _ in
                Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: #"{"items":[]}"#)))
            }
            router.get("/v1/audit/export") { _, _ in
                Response(status: .ok, headers: [.contentType: "application/x-ndjson"], body: .init(byteBuffer: ByteBuffer(string: stripped)))
            }
            try await Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0))).test(.live) { client in
                let port = try #require(client.port)
                var environment = ProcessInfo.processInfo.environment
                environment["COFFER_KEY"] = "k"
                let verify = try await CofferExecutable.run(
                    ["audit", "verify", "--server", "http://127.0.0.1:\(port)", "--public-key", pinned.path], environment: environment)
                #expect(verify.status == 1, "\(verify.stdout)\(verify.stderr)")
                #expect(verify.stdout.hasPrefix("NOT VERIFIED: no checkpoint signed by the pinned key covers"), "\(verify.stdout)")
            }
        }
    }

    /// What a release may not do: publish a file outside its directory (a link), hang on a
    /// pipe, smuggle a path or query in an id, take over or prune another app's products.
    @Test func syncRefusesHostileReleases() async throws {
        try await Demo.with(["--bundle-id", "com.coffer.demo", "--bundle-id", "com.other"]) { demo in
            let key = demo.server.adminKey
            let release = demo.root.appendingPathComponent("release")
            try FileManager.default.createDirectory(at: release, withIntermediateDirectories: true)
            let secret = demo.root.appendingPathComponent("secret.txt")
            try Data("not for sale".utf8).write(to: secret)
            func manifest(_ assets: [[String: String]], _ products: [[String: Any]] = [], bundle: String = "com.coffer.demo") throws {
                let object: [String: Any] = ["bundleId": bundle, "assets": assets, "products": products]
                try JSONSerialization.data(withJSONObject: object).write(to: release.appendingPathComponent("manifest.json"))
            }
            try FileManager.default.createSymbolicLink(at: release.appendingPathComponent("levels.json"), withDestinationURL: secret)
            try manifest([["assetId": "leak", "file": "levels.json"]])
            let link = try await demo.run(["admin", "sync", release.path, "--dry-run"], key: key)
            #expect(link.status == 2)
            #expect(link.stderr.contains("leads outside the release directory"), "\(link.stderr)")
            #expect(mkfifo(release.appendingPathComponent("pipe").path, 0o600) == 0)
            try manifest([["assetId": "pipe", "file": "pipe"]])
            let pipe = try await demo.run(["admin", "sync", release.path, "--dry-run"], key: key)
            #expect(pipe.status == 2)
            #expect(pipe.stderr.contains("is not a regular file"), "\(pipe.stderr)")
            try Data("{}".utf8).write(to: release.appendingPathComponent("real.json"))
            try manifest([["assetId": "a-new?name=index.html&", "file": "real.json"]])
            #expect(try await demo.run(["admin", "sync", release.path, "--dry-run"], key: key).stderr.contains("is not 1–128 characters"))
            try manifest([], [["productId": "com.other.gold?", "type": "consumable", "title": "X", "assetIds": []]])
            #expect(try await demo.run(["admin", "sync", release.path, "--dry-run"], key: key).status == 2)
            // What the server would refuse halfway through publishing is refused whole, before anything is sent.
            for (field, value, says) in [
                ("name", "level\u{202E}nib.exe", "bidirectional"), ("contentType", "text/plain\u{85}", "media type"),
                ("contentType", "text/plain; a=", "media type"),
            ] {
                try manifest([["assetId": "ok", "file": "real.json", field: value]])
                let refused = try await demo.run(["admin", "sync", release.path, "--dry-run"], key: key)
                #expect(refused.status == 2 && refused.stderr.contains(says), "\(field): \(refused.stderr)")
            }

            // Another app's product: never taken over, never pruned.
            #expect(
                try await demo.run(
                    ["admin", "products", "put", "com.other.gold", "--bundle-id", "com.other", "--type", "consumable", "--title", "Gold"], key: key
                ).status == 0)
            try manifest([], [["productId": "com.other.gold", "type": "consumable", "title": "Mine now", "assetIds": []]])
            let takeover = try await demo.run(["admin", "sync", release.path], key: key)
            #expect(takeover.status == 2)
            #expect(takeover.stderr.contains("belongs to com.other on the server"), "\(takeover.stderr)")
            try manifest([], [])
            let prune = try await demo.run(["admin", "sync", release.path, "--prune"], key: key)
            #expect(prune.status == 0, "\(prune.stderr)")
            #expect(!prune.stdout.contains("com.other.gold"), "\(prune.stdout)")
            let products = try Self.items(try await demo.run(["admin", "products", "list", "--json"], key: key).stdout)
            #expect(products.contains { $0["productId"] as? String == "com.other.gold" && $0["title"] as? String == "Gold" })
            #expect(!products.contains { $0["bundleId"] as? String == "com.coffer.demo" }, "this app's products pruned")
        }
    }

    /// Whatever a server answers, nothing reaches the terminal that moves the cursor, clears
    /// the screen or reorders text.
    @Test func serverTextIsMadeSafeForTheTerminal() {
        let hostile = ClientError.problem(status: 400, code: "x\u{1B}[2J", detail: "\u{1B}]0;owned\u{07} 1000\u{202E}0002")
        #expect(hostile.description == "400 x?[2J: ?]0;owned? 1000?0002")
        #expect(Terminal.safe("Pack \u{1B}[31mred\u{200B}\u{9B}") == "Pack ?[31mred??")
        #expect(Terminal.safe("ok\u{2028}LEDGER INTACT\u{2029}") == "ok?LEDGER INTACT?")
        #expect(Terminal.safe("Level Pack 1: The Caverns — ünïcode ✓") == "Level Pack 1: The Caverns — ünïcode ✓")
    }

    /// An export is read from a server the auditor does not trust: its text must not reach the
    /// terminal as escape sequences that move the cursor over the verdict and print "ledger
    /// intact" in its place (the header's `format` was echoed raw into the report).
    @Test func aHostileExportCannotRewriteTheVerdictOnTheTerminal() async throws {
        let dir = try makeTemporaryDirectory(prefix: "coffer-hostile")
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("export.ndjson")
        let hostile = "\u{1B}[3A\u{1B}[2K\rledger intact\u{1B}[J\u{9B}2J\u{202E}"
        let header = String(decoding: try JSONSerialization.data(withJSONObject: ["format": hostile]), as: UTF8.self)
        try Data((header + "\n").utf8).write(to: file)
        let text = try await CofferExecutable.run(["ledger", "verify", "--export", file.path])
        #expect(text.status == 1)
        #expect(text.stdout.hasPrefix("LEDGER TAMPERED"))
        let json = try await CofferExecutable.run(["ledger", "verify", "--export", file.path, "--json"])
        #expect(json.status == 1)
        for output in [text.stdout, json.stdout] {
            #expect(!output.unicodeScalars.contains { $0 == "\u{1B}" || $0 == "\u{9B}" || $0 == "\u{202E}" || $0 == "\r" }, "\(output)")
        }
        // The JSON is still JSON, its text what the export held, escaped as the ledger stores text.
        let report = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        #expect((report["intact"] as? Bool) == false)
        #expect(Terminal.safeJSON(#"{"a":"\#u{9B}\#u{202E}\#u{E0041}\#u{2028}"}"#) == #"{"a":"\u009b\u202e\udb40\udc41\u2028"}"#)
        // A carriage return outside the strings (a hostile server's layout) would overwrite the line.
        #expect(Terminal.safeJSON("{\"a\":1}\r{\"ok\":true}\n") == "{\"a\":1} {\"ok\":true}\n")
    }

    /// The client library retries an upload the server answered 503 `uploadsBusy`, after its
    /// `Retry-After`, and sends the file's SHA-256 as `Content-Digest` each time.
    @Test func uploadsAreRetriedWhileTheServerIsBusy() async throws {
        let attempts = AttemptCounter()
        let router = Router()
        router.put("/v1/admin/assets/:id") { request, _ -> Response in
            let digest = request.headers[.init("Content-Digest")!] ?? ""
            let body = try await request.body.collect(upTo: 1 << 20)
            let n = await attempts.next(digest: digest, bytes: body.readableBytes)
            if n < 3 {
                return Response(
                    status: .serviceUnavailable, headers: [.contentType: "application/problem+json", .retryAfter: "1"],
                    body: .init(byteBuffer: ByteBuffer(string: #"{"code":"uploadsBusy","detail":"busy","status":503}"#)))
            }
            let asset =
                #"{"assetId":"a","version":1,"name":"f","contentType":"application/octet-stream","size":5,"sha256":"2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824","createdAt":"2026-01-01T00:00:00Z"}"#
            return Response(status: .created, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: asset)))
        }
        let root = try makeTemporaryDirectory(prefix: "coffer-client")
        defer { try? FileManager.default.removeItem(at: root) }
        let file = root.appendingPathComponent("f")
        try Data("hello".utf8).write(to: file)
        let (digest, size) = try ContentSync.sha256(file: file.path)
        try await Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0))).test(.live) { client in
            let port = try #require(client.port)
            let asset = try await CofferAPIClient.withClient(server: "http://127.0.0.1:\(port)", key: "k") { api in
                try await api.upload(file: file.path, assetId: "a", name: "f", contentType: nil, sha256: digest, size: size, progress: { _ in })
            }
            #expect(asset.version == 1)
        }
        let seen = await attempts.seen
        #expect(seen.count == 3, "two busy answers, then the upload")
        #expect(Set(seen.map(\.digest)) == ["sha-256=:\(Data(digest).base64EncodedString()):"])
        #expect(seen.allSatisfy { $0.bytes == 5 }, "the whole file is sent again each time")
    }

    /// On a terminal: a bar redrawn in place (bytes, percent, rate, ETA); otherwise plain lines.
    @Test func progressIsABarOnATerminalAndPlainLinesOtherwise() {
        let written = Mutex<[String]>([])
        let bar = Progress(label: "level.json", total: 4096, terminal: true, write: { text in written.withLock { $0.append(text) } })
        bar.update(1024)
        bar.update(4096)
        bar.finish()
        let drawn = written.withLock { $0 }
        #expect(drawn.count == 2, "the last chunk is drawn once, by finish: \(drawn)")
        #expect(drawn[0].hasPrefix("\r\u{1B}[K[######                  ] level.json 1.0 KiB / 4.0 KiB 25%  ETA "), "\(drawn[0])")
        #expect(drawn[1].contains("4.0 KiB / 4.0 KiB 100%") && drawn[1].contains("done in") && drawn[1].hasSuffix("\n"))

        let lines = Mutex<[String]>([])
        let plain = Progress(label: "export", total: nil, terminal: false, write: { text in lines.withLock { $0.append(text) } })
        plain.update(10)
        plain.finish()
        let printed = lines.withLock { $0 }
        #expect(printed.count == 2)
        #expect(printed.allSatisfy { $0.hasPrefix("export 10 B") && $0.hasSuffix("\n") && !$0.contains("\r") }, "\(printed)")
    }

    actor AttemptCounter {
        var seen: [(digest: String, bytes: Int)] = []
        func next(digest: String, bytes: Int) -> Int {
            seen.append((digest, bytes))
            return seen.count
        }
    }
}

/// Ed25519 public keys as `--public-key` takes them (base64 of the raw key).
enum Curve25519PublicKeyText {
    static func random() -> String {
        Curve25519.Signing.PrivateKey().publicKey.rawRepresentation.base64EncodedString()
    }
}

enum SHA256Digest {
    static func of(_ bytes: [UInt8]) -> [UInt8] { Array(SHA256.hash(data: bytes)) }
}
