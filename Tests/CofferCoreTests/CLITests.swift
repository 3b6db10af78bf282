import CofferCore
import CofferSandbox
import CofferTestSupport
import Foundation
import Testing

/// Drives the built `coffer` executable the way scripts and operators do.
@Suite struct CLITests {
    func fixture(_ path: String) throws -> String { try Fixtures.root.appendingPathComponent(path).path }

    @Test func inspectValidRealReceiptAsJSON() async throws {
        let run = try await CofferExecutable.run(["receipt", "inspect", try fixture("legacy/L01_tp_production_getpure_2024.der"), "--json"])
        #expect(run.status == 0, "\(run.stderr)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
        #expect(object["verdict"] as? String == "valid")
        #expect(object["kind"] as? String == "appReceipt")
        #expect(object["environment"] as? String == "Production")
        let signing = try #require(object["signing"] as? [String: Any])
        #expect(signing["digest"] as? String == "sha256")
        #expect(signing["validatedAt"] as? String == "2024-02-23T17:27:16Z")
        #expect((signing["chain"] as? [String])?.last == "Apple Root CA")
        let receipt = try #require(object["receipt"] as? [String: Any])
        #expect(receipt["bundleId"] as? String == "org.getpure.pure-iphone")
        #expect(receipt["opaque"] as? String == "5df7132d42ab2cfba24ad546b6361906")
        let inApp = try #require(receipt["inApp"] as? [[String: Any]])
        #expect(inApp.count == 4)
        #expect(inApp[0]["purchaseDate"] as? String == "2023-05-09T23:20:55Z")
        #expect(inApp[0]["cancellationDate"] == nil, "absent fields are omitted")
    }

    @Test func inspectInvalidExitsOneAndStillDecodes() async throws {
        let run = try await CofferExecutable.run([
            "receipt", "inspect", try fixture("legacy/L03_tp_sandbox_nutcall_187iap_2020.der"), "--environment", "Sandbox", "--at",
            "2026-11-22T00:00:00Z", "--json",
        ])
        #expect(run.status == 1)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
        #expect(object["verdict"] as? String == "invalid")
        #expect((object["error"] as? [String: Any])?["code"] as? String == "certificateExpired")
        #expect(((object["receipt"] as? [String: Any])?["inApp"] as? [Any])?.count == 187)
    }

    @Test func inspectNotificationDecodesNestedJWS() async throws {
        let run = try await CofferExecutable.run([
            "receipt", "inspect", try fixture("jws/J23_real_sandbox_notification_REFUND_1760592122788_session.jws"), "--environment", "Sandbox",
            "--json",
        ])
        #expect(run.status == 0, "\(run.stderr)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
        #expect(object["kind"] as? String == "notification")
        let data = try #require((object["payload"] as? [String: Any])?["data"] as? [String: Any])
        let nested = try #require(data["signedTransactionInfo"] as? [String: Any])
        #expect(nested["transactionId"] as? String == "2000001032604840")
    }

    @Test func usageAndIOErrorsExitTwo() async throws {
        #expect(try await CofferExecutable.run(["receipt", "inspect", "/nonexistent/receipt"]).status == 2)
        #expect(try await CofferExecutable.run(["receipt", "inspect"]).status == 2)
        #expect(
            try await CofferExecutable.run(["receipt", "inspect", try fixture("legacy/L01_tp_production_getpure_2024.der"), "--at", "yesterday"])
                .status
                == 2)
        #expect(
            try await CofferExecutable.run(["receipt", "inspect", try fixture("legacy/L01_tp_production_getpure_2024.der"), "--environment", "Prod"])
                .status
                == 2)
        #expect(try await CofferExecutable.run(["receipt", "inspect", "--no-such-flag", "x"]).status == 2)
    }

    @Test func unsupportedFormatIsAnInvalidVerdict() async throws {
        let run = try await CofferExecutable.run([
            "receipt", "inspect", try fixture("negative/N01_rc_unsupportedReceipt1_old_transaction_receipt.bin"), "--json",
        ])
        #expect(run.status == 1)
        #expect(run.stdout.contains("\"unsupportedFormat\""))
    }

    /// A forged receipt's text is the sender's: its ids reach the terminal made safe, so they
    /// cannot rewrite "verdict: invalid" (an unknown signer here) as another verdict.
    @Test func aReceiptsTextCannotRewriteTheVerdict() async throws {
        let dir = try makeTemporaryDirectory(prefix: "coffer-cli")
        defer { try? FileManager.default.removeItem(at: dir) }
        let hostile = "\u{1B}[1A\u{1B}[2K\rverdict: valid\u{9B}"
        let spec = ReceiptSpec(bundleId: "com.x" + hostile, purchases: [PurchaseSpec(productId: "p" + hostile, transactionId: "1" + hostile)])
        let file = dir.appendingPathComponent("forged.der")
        try Data(try sharedCA.mintReceipt(spec, now: testNow)).write(to: file)
        for arguments in [["receipt", "inspect", file.path], ["receipt", "inspect", file.path, "--json"]] {
            let run = try await CofferExecutable.run(arguments)
            #expect(run.status == 1)
            #expect(!run.stdout.unicodeScalars.contains { $0 == "\u{1B}" || $0 == "\u{9B}" || $0 == "\r" }, "\(arguments): \(run.stdout)")
        }
    }

    @Test func sandboxRoundTrip() async throws {
        let dir = try makeTemporaryDirectory(prefix: "coffer-cli")
        defer { try? FileManager.default.removeItem(at: dir) }
        let ca = dir.appendingPathComponent("ca").path
        #expect(try await CofferExecutable.run(["sandbox", "init", "--dir", ca]).status == 0)
        #expect(try await CofferExecutable.run(["sandbox", "init", "--dir", ca]).status == 2, "never silently overwrites a CA")
        let keyMode = try FileManager.default.attributesOfItem(atPath: ca + "/receipt-signer-key.pem")[.posixPermissions] as? Int
        #expect(keyMode == 0o600)
        // Replaced: each file written whole beside the old one with its mode, then renamed over it.
        let before = try Data(contentsOf: URL(fileURLWithPath: ca + "/receipt-signer-key.pem"))
        #expect(try await CofferExecutable.run(["sandbox", "init", "--dir", ca, "--force"]).status == 0)
        #expect(try Data(contentsOf: URL(fileURLWithPath: ca + "/receipt-signer-key.pem")) != before)
        #expect(try FileManager.default.attributesOfItem(atPath: ca + "/receipt-signer-key.pem")[.posixPermissions] as? Int == 0o600)
        #expect(try FileManager.default.attributesOfItem(atPath: ca + "/root.pem")[.posixPermissions] as? Int == 0o644)
        #expect(try FileManager.default.contentsOfDirectory(atPath: ca).filter { $0.hasSuffix(".tmp") }.isEmpty, "no file left half-written")

        let receipt = dir.appendingPathComponent("r.der").path
        let mint = try await CofferExecutable.run([
            "sandbox", "receipt", "--dir", ca, "--bundle-id", "com.coffer.demo", "--purchase", "level.pack.1:1000",
            "--purchase", "level.pack.2:1001", "--ber", "--digest", "sha1", "--out", receipt,
        ])
        #expect(mint.status == 0, "\(mint.stderr)")
        let ok = try await CofferExecutable.run([
            "receipt", "inspect", receipt, "--root", ca + "/root.pem", "--environment", "LocalTesting", "--bundle-id", "com.coffer.demo",
        ])
        #expect(ok.status == 0, "\(ok.stdout)\(ok.stderr)")
        #expect(ok.stdout.contains("level.pack.2 transaction 1001"))
        // Apple's roots (the default) never trust it, and Production is refused for a non-Apple root.
        #expect(try await CofferExecutable.run(["receipt", "inspect", receipt]).status == 1)
        #expect(
            try await CofferExecutable.run(["receipt", "inspect", receipt, "--root", ca + "/root.cer", "--environment", "Production"]).status == 2)
        #expect(try await CofferExecutable.run(["receipt", "inspect", receipt, "--root", ca + "/root.cer", "--bundle-id", "com.other"]).status == 1)

        let jws = try await CofferExecutable.run([
            "sandbox", "transaction", "--dir", ca, "--bundle-id", "com.coffer.demo", "--product", "level.pack.1", "--transaction-id", "77",
        ])
        #expect(jws.status == 0)
        let checked = try await CofferExecutable.run(["receipt", "inspect", "-", "--root", ca + "/root.cer", "--json"], stdin: Data(jws.stdout.utf8))
        #expect(checked.status == 0, "\(checked.stdout)")
        #expect(checked.stdout.contains("\"kind\" : \"transaction\""))

        let refund = try await CofferExecutable.run([
            "sandbox", "notification", "--dir", ca, "--type", "REFUND", "--bundle-id", "com.coffer.demo", "--product", "level.pack.1",
            "--transaction-id", "77",
        ])
        let refundChecked = try await CofferExecutable.run(
            ["receipt", "inspect", "-", "--root", ca + "/root.cer", "--json"], stdin: Data(refund.stdout.utf8))
        #expect(refundChecked.status == 0)
        #expect(refundChecked.stdout.contains("revocationDate"))

        let many = dir.appendingPathComponent("many").path
        let batch = try await CofferExecutable.run([
            "sandbox", "receipt", "--dir", ca, "--bundle-id", "b", "--purchase", "p:500", "--count", "3", "--out-dir", many,
        ])
        #expect(batch.status == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: many).sorted() == ["500.der", "501.der", "502.der"])
    }

    /// Apple's roots vouch for Production only unless Sandbox is named; a non-Apple `--root`
    /// vouches for LocalTesting only unless scoped (`--root Sandbox=FILE`).
    @Test func rootsAndEnvironments() async throws {
        func verdict(_ run: CofferExecutable.Run) throws -> (String?, String?) {
            let object = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any], "\(run.stderr)")
            return (object["verdict"] as? String, (object["error"] as? [String: Any])?["code"] as? String)
        }
        // Built-in Apple roots, no --environment: Production only.
        let production = try fixture("legacy/L01_tp_production_getpure_2024.der")
        let sandbox = try fixture("legacy/L11_rc_sandbox_revenuecat_sample1_2020.der")
        let sandboxJWS = try fixture("jws/J02_real_sandbox_transaction_consumable_goodheart_2025_mingos.jws")
        #expect(try await CofferExecutable.run(["receipt", "inspect", production, "--json"]).status == 0)
        let refused = try await CofferExecutable.run(["receipt", "inspect", sandbox, "--json"])
        #expect(refused.status == 1)
        #expect(try verdict(refused) == ("invalid", "environmentNotAllowed"))
        let refusedJWS = try await CofferExecutable.run(["receipt", "inspect", sandboxJWS, "--json"])
        #expect(try verdict(refusedJWS) == ("invalid", "environmentNotAllowed"))
        // Named: exactly what is named.
        #expect(try await CofferExecutable.run(["receipt", "inspect", sandbox, "--environment", "sandbox", "--json"]).status == 0)
        #expect(try await CofferExecutable.run(["receipt", "inspect", sandboxJWS, "--environment", "Sandbox", "--json"]).status == 0)
        #expect(try await CofferExecutable.run(["receipt", "inspect", production, "--environment", "Sandbox", "--json"]).status == 1)
        #expect(
            try await CofferExecutable.run(["receipt", "inspect", production, "--environment", "Production", "--environment", "Sandbox"]).status == 0)
        #expect(
            try await CofferExecutable.run(["receipt", "inspect", production, "--environment", "Xcode"]).status == 2, "no root vouches for Xcode")

        // A sandbox root: LocalTesting unless scoped.
        let dir = try makeTemporaryDirectory(prefix: "coffer-cli")
        defer { try? FileManager.default.removeItem(at: dir) }
        let ca = dir.appendingPathComponent("ca").path
        let created = try await CofferExecutable.run(["sandbox", "init", "--dir", ca])
        #expect(created.status == 0)
        #expect(created.stdout.contains("--root \(ca)/root.cer"), "\(created.stdout)")
        #expect(created.stdout.contains("Sandbox=\(ca)/root.cer"), "the advice names the scoped form")
        func mint(_ environment: String) async throws -> Data {
            let run = try await CofferExecutable.run([
                "sandbox", "transaction", "--dir", ca, "--bundle-id", "com.coffer.demo", "--product", "p", "--transaction-id", "9",
                "--environment", environment,
            ])
            #expect(run.status == 0, "\(run.stderr)")
            return Data(run.stdout.utf8)
        }
        let local = try await mint("LocalTesting")
        let staged = try await mint("Sandbox")
        let root = ca + "/root.cer"
        #expect(try await CofferExecutable.run(["receipt", "inspect", "-", "--root", root], stdin: local).status == 0)
        let unscoped = try await CofferExecutable.run(["receipt", "inspect", "-", "--root", root, "--json"], stdin: staged)
        #expect(try verdict(unscoped) == ("invalid", "environmentNotAllowed"))
        #expect(try await CofferExecutable.run(["receipt", "inspect", "-", "--root", "Sandbox=" + root], stdin: staged).status == 0)
        #expect(
            try await CofferExecutable.run(["receipt", "inspect", "-", "--root", "sandbox=" + root], stdin: local).status == 1, "scoped: Sandbox only"
        )
        let both = ["--root", "SANDBOX=" + root, "--root", "localtesting=" + root]
        #expect(try await CofferExecutable.run(["receipt", "inspect", "-"] + both, stdin: staged).status == 0)
        #expect(try await CofferExecutable.run(["receipt", "inspect", "-"] + both, stdin: local).status == 0)
        // Never Production; an unscoped root cannot be stretched by --environment.
        #expect(try await CofferExecutable.run(["receipt", "inspect", "-", "--root", "Production=" + root], stdin: local).status == 2)
        let stretched = try await CofferExecutable.run(["receipt", "inspect", "-", "--root", root, "--environment", "Sandbox"], stdin: staged)
        #expect(stretched.status == 2)
        #expect(stretched.stderr.contains("Sandbox="), "\(stretched.stderr)")
        // A path containing '=' whose prefix is not an environment is a path.
        let odd = dir.appendingPathComponent("a=b")
        try FileManager.default.createDirectory(at: odd, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: root, toPath: odd.appendingPathComponent("root=1.cer").path)
        #expect(
            try await CofferExecutable.run(["receipt", "inspect", "-", "--root", odd.appendingPathComponent("root=1.cer").path], stdin: local).status
                == 0)
        #expect(
            try await CofferExecutable.run(
                ["receipt", "inspect", "-", "--root", "Xcode=" + odd.appendingPathComponent("root=1.cer").path], stdin: local
            )
            .status == 1)
        #expect(try await CofferExecutable.run(["receipt", "inspect", "-", "--root", "Sandbox="], stdin: local).status == 2)
    }

    /// Flags beat COFFER_* variables, which beat the config file, which beats the defaults.
    @Test func serveConfigurationPrecedence() async throws {
        let dir = try makeTemporaryDirectory(prefix: "coffer-cli")
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("coffer.json")
        try Data(
            #"{"host":"0.0.0.0","port":9000,"dataDirectory":"/srv/file","bundleIds":["com.file"],"tokenTTL":120,"logLevel":"debug","trustedProxies":["10.0.0.9"]}"#
                .utf8
        ).write(to: file)
        func resolved(_ args: [String], _ env: [String: String]) async throws -> [String: Any] {
            let run = try await CofferExecutable.run(["serve", "--print-config"] + args, environment: env)
            #expect(run.status == 0, "\(run.stderr)")
            return try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
        }
        let defaults = try await resolved(["--bundle-id", "com.flag"], [:])
        #expect(defaults["host"] as? String == "127.0.0.1")
        #expect(defaults["port"] as? Int == 8080)
        #expect(defaults["dataDirectory"] as? String == "coffer-data")
        #expect(defaults["tokenTTL"] as? Int == 600)
        #expect(defaults["uploadLimit"] as? Int == 536_870_912)

        let fromFile = try await resolved(["--config", file.path], [:])
        #expect(fromFile["host"] as? String == "0.0.0.0")
        #expect(fromFile["port"] as? Int == 9000)
        #expect(fromFile["bundleIds"] as? [String] == ["com.file"])
        #expect(fromFile["trustedProxies"] as? [String] == ["10.0.0.9"])
        #expect(fromFile["logLevel"] as? String == "debug")

        let env = ["COFFER_CONFIG": file.path, "COFFER_PORT": "9100", "COFFER_BUNDLE_IDS": "com.env1, com.env2", "COFFER_TOKEN_KEY": "secret"]
        let fromEnv = try await resolved([], env)
        #expect(fromEnv["port"] as? Int == 9100)
        #expect(fromEnv["host"] as? String == "0.0.0.0", "unset in the environment: the file still counts")
        #expect(fromEnv["bundleIds"] as? [String] == ["com.env1", "com.env2"])
        #expect(fromEnv["tokenKeyFromEnvironment"] as? Bool == true)
        #expect(!(String(describing: fromEnv)).contains("secret"), "secrets are never printed")

        let fromFlags = try await resolved(
            ["--port", "9200", "--bundle-id", "com.flag", "--data-dir", "/srv/flag", "--trusted-proxy", "192.0.2.1"], env)
        #expect(fromFlags["port"] as? Int == 9200)
        #expect(fromFlags["bundleIds"] as? [String] == ["com.flag"])
        #expect(fromFlags["dataDirectory"] as? String == "/srv/flag")
        #expect(fromFlags["trustedProxies"] as? [String] == ["192.0.2.1"])
        #expect(fromFlags["tokenTTL"] as? Int == 120)
    }

    @Test func serveRejectsBadConfiguration() async throws {
        let dir = try makeTemporaryDirectory(prefix: "coffer-cli")
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("typo.json")
        try Data(#"{"bundleIds":["com.x"],"tokenTtl":60}"#.utf8).write(to: file)
        let typo = try await CofferExecutable.run(["serve", "--print-config", "--config", file.path], environment: [:])
        #expect(typo.status == 2)
        #expect(typo.stderr.contains("tokenTtl"), "\(typo.stderr)")
        #expect(try await CofferExecutable.run(["serve", "--print-config", "--bundle-id", "a", "--port", "70000"], environment: [:]).status == 2)
        #expect(
            try await CofferExecutable.run(["serve", "--print-config", "--bundle-id", "a", "--trusted-proxy", "nginx"], environment: [:]).status == 2)
        for typo in ["1.2.3", "10.0.0.256", "1::2::3", "::ffff:1.2.3"] {
            #expect(
                try await CofferExecutable.run(["serve", "--print-config", "--bundle-id", "a", "--trusted-proxy", typo], environment: [:]).status
                    == 2,
                "\(typo)")
        }
        #expect(
            try await CofferExecutable.run(["serve", "--print-config", "--bundle-id", "a", "--trusted-proxy", "::FFFF:10.0.0.1"], environment: [:])
                .status
                == 0)
        #expect(try await CofferExecutable.run(["serve", "--print-config", "--bundle-id", "a", "--token-ttl", "1"], environment: [:]).status == 2)
        #expect(try await CofferExecutable.run(["serve", "--print-config", "--bundle-id", "a"], environment: ["COFFER_PORT": "eighty"]).status == 2)
        // A misspelt variable is refused, with the one meant; the client's and tests' are not settings.
        let misspelt = try await CofferExecutable.run(
            ["serve", "--print-config", "--bundle-id", "a"], environment: ["COFFER_TRUSTED_PROXY": "127.0.0.1"])
        #expect(misspelt.status == 2)
        #expect(misspelt.stderr.contains("COFFER_TRUSTED_PROXY (did you mean COFFER_TRUSTED_PROXIES?)"), "\(misspelt.stderr)")
        #expect(
            try await CofferExecutable.run(
                ["serve", "--print-config", "--bundle-id", "a"], environment: ["COFFER_KEY": "k", "COFFER_SERVER": "s", "COFFER_TEST_X": "1"]
            ).status == 0)
        // --print-config never shows a secret in an S3 endpoint (the server refuses such an endpoint later).
        let endpoint = try await CofferExecutable.run(
            ["serve", "--print-config", "--bundle-id", "a", "--content-store", "s3://game"],
            environment: ["COFFER_S3_ENDPOINT": "https://AKID:SECRET@minio.example:9000"])
        #expect(endpoint.status == 0, "\(endpoint.stderr)")
        #expect(!endpoint.stdout.contains("SECRET") && !endpoint.stdout.contains("AKID"), "\(endpoint.stdout)")
        #expect(endpoint.stdout.contains("minio.example:9000"), "\(endpoint.stdout)")
        // A password URLComponents cannot parse as one (a "#", a space) is hidden all the same.
        let unparsed = try await CofferExecutable.run(
            ["serve", "--print-config", "--bundle-id", "a", "--content-store", "s3://game"],
            environment: ["COFFER_S3_ENDPOINT": "https://AKID:SE#C RET@minio.example:9000"])
        #expect(!unparsed.stdout.contains("SE#C") && !unparsed.stdout.contains("RET@") && !unparsed.stdout.contains("AKID"), "\(unparsed.stdout)")
        // No scheme, and a "://" later on: still hidden.
        let schemeless = try await CofferExecutable.run(
            ["serve", "--print-config", "--bundle-id", "a", "--content-store", "s3://game"],
            environment: ["COFFER_S3_ENDPOINT": "AKID:SECRET@minio.example:9000/?u=https://x"])
        #expect(schemeless.status == 0, "\(schemeless.stderr)")
        #expect(!schemeless.stdout.contains("SECRET") && !schemeless.stdout.contains("AKID"), "\(schemeless.stdout)")
        let noBundle = try await CofferExecutable.run(["serve", "--data-dir", dir.appendingPathComponent("d").path], environment: [:])
        #expect(noBundle.status == 2)
        #expect(noBundle.stderr.contains("no bundle id"))
    }
}
