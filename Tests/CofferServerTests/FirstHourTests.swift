import CofferCore
import CofferTestSupport
import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// What a new user meets in their first hour, from a fresh clone: each a rough edge found by
/// trying it, kept fixed here.
@Suite struct FirstHourTests {
    static var repository: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }

    /// A listening socket on a free loopback port, closed by the caller.
    static func occupiedPort() throws -> (fd: Int32, port: Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        try #require(fd >= 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && listen(fd, 1) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        try #require(bound)
        return (fd, Int(UInt16(bigEndian: address.sin_port)))
    }

    @Test func aPortInUseFailsBeforeTheBannerWithOneLine() async throws {
        let (fd, port) = try Self.occupiedPort()
        defer { close(fd) }
        let data = try makeTemporaryDirectory(prefix: "coffer-port")
        defer { try? FileManager.default.removeItem(at: data) }
        let run = try await CofferExecutable.run([
            "serve", "--demo", "--data-dir", data.path, "--port", String(port), "--content", Self.repository.appendingPathComponent("content").path,
        ])
        #expect(run.status == 2)
        #expect(run.stdout.isEmpty, "no banner: \(run.stdout)")
        #expect(run.stderr.split(separator: "\n").count == 1, "\(run.stderr)")
        #expect(run.stderr.contains("127.0.0.1:\(port) is already in use"), "\(run.stderr)")
    }

    @Test func uploadsWithoutATypeGetTheNamesTypeAndReuploadsKeepTheName() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let admin = h.bearer(h.adminKey)
        try await h.app.test(.router) { client in
            // No Content-Type, no name: application/octet-stream, named after the id.
            let plain = try await client.execute(uri: "/v1/admin/assets/blob", method: .put, headers: admin, body: ByteBuffer(string: "x"))
            #expect(try Harness.json(plain)["contentType"] as? String == "application/octet-stream")
            #expect(try Harness.json(plain)["name"] as? String == "blob")
            // curl --data-binary sends a form type: no asset's type; the name's extension decides.
            var form = admin
            form[.contentType] = "application/x-www-form-urlencoded"
            let named = try await client.execute(
                uri: "/v1/admin/assets/level-9?name=level9.json", method: .put, headers: form, body: ByteBuffer(string: "{}"))
            #expect(try Harness.json(named)["contentType"] as? String == "application/json")
            // A re-upload without ?name= keeps the name (and takes its type from it).
            let again = try await client.execute(uri: "/v1/admin/assets/level-9", method: .put, headers: admin, body: ByteBuffer(string: "[]"))
            let second = try Harness.json(again)
            #expect(second["version"] as? Int == 2)
            #expect(second["name"] as? String == "level9.json")
            #expect(second["contentType"] as? String == "application/json")
            // Every version, newest first (the console's versions panel).
            let versions = try await client.execute(uri: "/v1/admin/assets/level-9/versions", method: .get, headers: admin)
            let listed = try #require(try JSONSerialization.jsonObject(with: Data(buffer: versions.body)) as? [[String: Any]])
            #expect(listed.map { $0["version"] as? Int } == [2, 1])
            #expect(try await client.execute(uri: "/v1/admin/assets/nope/versions", method: .get, headers: admin).status == .notFound)
            // Active types are never guessed: an SVG or HTML name is stored as plain bytes.
            for name in ["skin.svg", "page.html", "app.js"] {
                let active = try await client.execute(
                    uri: "/v1/admin/assets/a-\(name.prefix(4))?name=\(name)", method: .put, headers: admin, body: ByteBuffer(string: "<svg/>"))
                #expect(try Harness.json(active)["contentType"] as? String == "application/octet-stream", "\(name)")
            }
            // A type sent is kept.
            var typed = admin
            typed[.contentType] = "image/png"
            let png = try await client.execute(uri: "/v1/admin/assets/level-9", method: .put, headers: typed, body: ByteBuffer(string: "p"))
            #expect(try Harness.json(png)["contentType"] as? String == "image/png")
        }
    }

    @Test func aProductOfAnUnconfiguredAppIsRefused() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        var json = h.bearer(h.adminKey)
        json[.contentType] = "application/json"
        let headers = json
        try await h.app.test(.router) { client in
            let body = #"{"bundleId":"com.someone.else","type":"nonConsumable","assetIds":["tiles"],"title":"Never redeemable"}"#
            let refused = try await client.execute(
                uri: "/v1/admin/products/com.someone.else.pack", method: .put, headers: headers, body: ByteBuffer(string: body))
            #expect(refused.status == .unprocessableContent)
            #expect(Harness.code(refused) == "bundleMismatch")
            // A title with an escape sequence or a line break: refused.
            let escape = #"{"bundleId":"com.coffer.demo","type":"consumable","assetIds":[],"title":"Pack \u001b[2J"}"#
            let titled = try await client.execute(
                uri: "/v1/admin/products/com.coffer.demo.x", method: .put, headers: headers, body: ByteBuffer(string: escape))
            #expect(titled.status == .badRequest)
            let listed = try await client.execute(uri: "/v1/admin/products", method: .get, headers: h.bearer(h.adminKey))
            #expect(!String(buffer: listed.body).contains("com.someone.else"), "nothing stored")
        }
    }

    @Test func anAuditorKeyOnAnAdminRouteReadsWell() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        try await h.app.test(.router) { client in
            let refused = try await client.execute(uri: "/v1/admin/assets", method: .get, headers: h.bearer(h.auditorKey))
            #expect(try Harness.json(refused)["detail"] as? String == "an auditor key may not do this")
            #expect(try Harness.json(refused)["title"] as? String == "Forbidden", "every problem has its type's title")
            // Which key is this, without probing for a 403.
            let me = try await client.execute(uri: "/v1/whoami", method: .get, headers: h.bearer(h.auditorKey))
            #expect(me.status == .ok)
            let who = try Harness.json(me)
            #expect(who["role"] as? String == "auditor" && who["name"] as? String == "test auditor")
            #expect(who["secretHash"] == nil)
            #expect(
                try Harness.json(try await client.execute(uri: "/v1/whoami", method: .get, headers: h.bearer(h.adminKey)))["role"] as? String
                    == "admin")
            #expect(try await client.execute(uri: "/v1/whoami", method: .get).status == .unauthorized)
            // Cursors are the digits a page gave, nothing an integer parser would also take.
            for cursor in ["%2B1", "-1", "1%20", "00000000000000000001", ""] {
                let page = try await client.execute(uri: "/v1/audit/redemptions?cursor=\(cursor)", method: .get, headers: h.bearer(h.auditorKey))
                #expect(page.status == .badRequest, "cursor \(cursor)")
            }
            #expect(try await client.execute(uri: "/v1/audit/revocations?cursor=0", method: .get, headers: h.bearer(h.auditorKey)).status == .ok)
            // The console's charts: counted by the database, the last 24 hours by default, at most 31 days.
            let stats = try await client.execute(uri: "/v1/audit/stats/hourly", method: .get, headers: h.bearer(h.auditorKey))
            #expect(stats.status == .ok)
            #expect(try Harness.json(stats)["hours"] as? [Any] != nil)
            let span = try await client.execute(
                uri: "/v1/audit/stats/hourly?from=2026-01-01T00:00:00Z&to=2026-03-01T00:00:00Z", method: .get, headers: h.bearer(h.auditorKey))
            #expect(span.status == .badRequest)
        }
    }

    @Test func sandboxHintsPointAtTheDemosCANotAtANewOne() async throws {
        let root = try makeTemporaryDirectory(prefix: "coffer-hints")
        defer { try? FileManager.default.removeItem(at: root) }
        let missing = try await CofferExecutable.run([
            "sandbox", "receipt", "--dir", root.appendingPathComponent("nowhere").path, "--bundle-id", "com.coffer.demo", "--purchase", "p:1",
        ])
        #expect(missing.status == 2)
        #expect(missing.stderr.contains("DATA/sandbox"), "\(missing.stderr)")
        #expect(!missing.stderr.contains("create one with"), "a new CA would be trusted by no server: \(missing.stderr)")

        let ca = root.appendingPathComponent("sandbox").path
        #expect(try await CofferExecutable.run(["sandbox", "init", "--dir", ca]).status == 0)
        let receipt = root.appendingPathComponent("r.der").path
        #expect(
            try await CofferExecutable.run([
                "sandbox", "receipt", "--dir", ca, "--bundle-id", "com.coffer.demo", "--purchase", "com.coffer.demo.levelpack1:1", "--out", receipt,
            ]).status == 0)
        let inspect = try await CofferExecutable.run(["receipt", "inspect", receipt])
        #expect(inspect.status == 1)
        #expect(inspect.stdout.contains("hint: ") && inspect.stdout.contains("--root DATA/sandbox/root.pem"), "\(inspect.stdout)")
        let trusted = try await CofferExecutable.run(["receipt", "inspect", receipt, "--root", ca + "/root.pem"])
        #expect(trusted.status == 0, "the hint's flag works: \(trusted.stdout)")
    }

    /// `--print-config` shows what the server will use, defaults spelled out: trust roots and
    /// environments, storage, an absolute data directory, every key (null when off).
    @Test func printConfigShowsEffectiveDefaults() async throws {
        let run = try await CofferExecutable.run(["serve", "--print-config", "--bundle-id", "com.example.game"], environment: [:])
        #expect(run.status == 0, "\(run.stderr)")
        let printed = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
        #expect(printed.keys.contains("playerIssuer") && printed["playerIssuer"] is NSNull, "every setting shown, null when off")
        #expect(printed["dataDirectory"] as? String == "coffer-data", "the setting as resolved")
        let config = try #require(printed["effective"] as? [String: Any])
        #expect((config["roots"] as? [String])?.first?.contains("Apple Root CA") == true)
        #expect(config["environments"] as? [String] == ["Production"])
        #expect((config["dataDirectory"] as? String)?.hasPrefix("/") == true)
        #expect((config["database"] as? String)?.hasPrefix("SQLite: /") == true)
        #expect((config["contentStore"] as? String)?.hasPrefix("local: /") == true)
        let demo = try await CofferExecutable.run(["serve", "--print-config", "--demo"], environment: [:])
        let demoConfig = try #require(
            (try JSONSerialization.jsonObject(with: Data(demo.stdout.utf8)) as? [String: Any])?["effective"] as? [String: Any])
        #expect(demoConfig["environments"] as? [String] == ["LocalTesting"])
        #expect(demoConfig["bundleIds"] as? [String] == ["com.coffer.demo"])
    }

    /// Every command's help: no default said twice (ours and the parser's), and no sentence
    /// broken by a hard line end in the middle of a paragraph.
    @Test func helpTextWrapsCleanly() async throws {
        let commands = [
            [], ["serve"], ["migrate"], ["keys", "create"], ["keys", "revoke"], ["ledger", "verify"], ["ledger", "export"], ["ledger", "copy"],
            ["ledger", "adopt"], ["ledger", "public-key"], ["ledger", "keygen"], ["receipt", "inspect"], ["sandbox"], ["sandbox", "receipt"],
            ["sandbox", "transaction"], ["sandbox", "notification"], ["content", "gc"], ["content", "migrate"], ["admin"],
            ["admin", "assets", "upload"], ["admin", "sync"], ["admin", "products", "put"], ["audit"], ["audit", "redemptions"], ["audit", "export"],
            ["audit", "verify"],
        ]
        for command in commands {
            let help = try await CofferExecutable.run(command + ["--help"], environment: ["COLUMNS": "100"]).stdout
            let options = help.components(separatedBy: "\nOPTIONS:").last ?? ""
            // An option's help is its line plus indented continuation lines.
            var entries: [String] = []
            for line in options.split(separator: "\n") {
                if line.hasPrefix("  -") || entries.isEmpty { entries.append(String(line)) } else { entries[entries.count - 1] += " " + line }
            }
            for entry in entries {
                #expect(!(entry.contains("Default:") && entry.contains("(default:")), "\(command): a default said twice: \(entry)")
            }
            let prose = help.components(separatedBy: "\nUSAGE:").first ?? ""
            let lines = prose.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            for (line, next) in zip(lines, lines.dropFirst()) where !line.isEmpty && !next.isEmpty {
                let ragged = line.count < 45 && !line.hasSuffix(":") && !line.hasSuffix(".") && next.first?.isLowercase == true
                #expect(!ragged, "\(command): a paragraph broken mid-sentence: \(line) / \(next)")
            }
        }
    }

    /// The README names test suites; each must exist.
    @Test func readmeTestNamesMatchTheSuites() throws {
        let readme = try String(contentsOf: Self.repository.appendingPathComponent("README.md"), encoding: .utf8)
        let named = Set(
            readme.matches(of: /`([A-Z][A-Za-z0-9]+Tests)`/).map { String($0.output.1) })
        #expect(!named.isEmpty)
        var suites = Set<String>()
        let tests = Self.repository.appendingPathComponent("Tests")
        for case let file as String in FileManager.default.enumerator(atPath: tests.path) ?? .init() where file.hasSuffix(".swift") {
            let text = try String(contentsOf: tests.appendingPathComponent(file), encoding: .utf8)
            for match in text.matches(of: /(?:struct|class|enum) ([A-Z][A-Za-z0-9]+Tests)\b/) { suites.insert(String(match.output.1)) }
        }
        let targets = try FileManager.default.contentsOfDirectory(atPath: tests.path)
        for name in named.sorted() {
            #expect(suites.contains(name) || targets.contains(name), "the README names \(name), which no test defines")
        }
    }
}
