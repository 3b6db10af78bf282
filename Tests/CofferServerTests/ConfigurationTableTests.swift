import CofferServer
import CofferTestSupport
import Foundation
import Testing

/// The README's configuration table is the contract: every row is a ``CofferSetting`` (and
/// back), every flag is `coffer serve`'s, and `coffer serve --print-config` reads every
/// option from each form the table documents — flag, `COFFER_*` variable, config key — with
/// the documented precedence and defaults.
struct ConfigurationTableTests {
    /// One row of the README's table: the first `code` of each cell, nil for "—".
    struct Row: Hashable {
        var flag: String?
        var environmentVariable: String?
        var key: String?
        var defaultValue: String?
    }

    static func readmeRows() throws -> [Row] {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let lines = readme.split(separator: "\n", omittingEmptySubsequences: false)
        let header = try #require(lines.firstIndex { $0.hasPrefix("| flag | environment | config key | default |") })
        func code(_ cell: Substring) -> String? {
            let parts = cell.split(separator: "`", omittingEmptySubsequences: false)
            return parts.count >= 3 ? String(parts[1]) : nil
        }
        return lines[(header + 2)...].prefix { $0.hasPrefix("|") }.map { line in
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).dropFirst()
            let values = cells.prefix(4).map(code)
            return Row(flag: values[0], environmentVariable: values[1], key: values[2], defaultValue: values[3])
        }
    }

    /// The table's settings are exactly `CofferSetting.all` (`--config` / `COFFER_CONFIG` are in the
    /// text above it; `--demo` is a mode, not a setting).
    @Test func theReadmeTableIsCofferSettingAll() async throws {
        let documented = Set(
            try Self.readmeRows().filter { $0.environmentVariable != nil }.map {
                Row(flag: $0.flag, environmentVariable: $0.environmentVariable, key: $0.key)
            })
        let implemented = Set(
            CofferSetting.all.filter { $0 != .config }.map {
                Row(flag: $0.flag, environmentVariable: $0.environmentVariable, key: $0.inConfigFile ? $0.key : nil)
            })
        #expect(documented == implemented)
        let serveHelp = try await CofferExecutable.run(["serve", "--help"], environment: [:]).stdout
        for flag in CofferSetting.all.compactMap(\.flag) { #expect(serveHelp.contains(flag + " "), "\(flag) is not a flag of coffer serve") }
    }

    /// Per setting, the value given as a flag, as a variable and in the file (each valid for it).
    static let samples: [String: (flag: any Sendable, environment: any Sendable, file: any Sendable)] = [
        "host": ("flag.example", "env.example", "file.example"), "port": (1001, 1002, 1003),
        "dataDirectory": ("/srv/flag", "/srv/env", "/srv/file"), "bundleIds": (["f1", "f2"], ["e1", "e2"], ["c1", "c2"]),
        "appAppleId": (11, 12, 13), "roots": (["Sandbox=f.pem", "g.pem"], ["Xcode=e.pem"], ["c.pem"]),
        "environments": (["Sandbox", "Production"], ["Xcode"], ["LocalTesting"]), "tokenTTL": (101, 102, 103),
        "uploadLimit": (201, 202, 203), "logLevel": ("trace", "debug", "notice"), "rateRedemptions": (0, 1, 2),
        "rateRedemptionBurst": (3, 4, 5), "rateAuthFailures": (6, 7, 8), "rateRecordedRefusals": (51, 52, 53), "rateNotifications": (9, 10, 11),
        "rateNotificationBurst": (12, 13, 14), "downloadStallTimeout": (15, 16, 17), "downloadsPerAddress": (18, 19, 20),
        "bodyBudget": (9_000_001, 9_000_002, 9_000_003), "accelRedirect": ("/_f/", "/_e/", "/_c/"),
        "checkpointEvery": (21, 22, 23), "checkpointInterval": (24, 25, 26), "ledgerKey": ("/k/flag.key", "/k/env.key", "/k/file.key"),
        "database": (
            "postgres://f@db:5433/flag?sslmode=disable", "postgres://e@db:5433/env?sslmode=require", "postgres://c@db:5433/file?sslmode=verify-full"
        ),
        "databasePoolSize": (31, 32, 33),
        "auditConcurrency": (41, 42, 43),
        "eventLoops": (1, 2, 3),
        "contentStore": ("s3://flag-bucket/flag", "s3://env-bucket", "s3://file-bucket/a/b"),
        "s3Endpoint": ("http://flag.example:9000", "https://env.example", "http://file.example:9001"),
        "s3Region": ("eu-west-1", "auto", "us-west-2"), "s3PartSize": (5_242_880, 6_291_456, 7_340_032),
        "contentCacheSize": (0, 1_000_000, 2_000_000),
        "downloadMode": ("accel", "accel", "accel"),
        "playerKeys": (["/k/f1.pem", "/k/f2.jwks"], ["/k/e.pem"], ["/k/c.pem"]), "playerIssuer": ("iss-f", "iss-e", "iss-c"),
        "playerAudience": ("aud-f", "aud-e", "aud-c"), "playerAccountClaim": ("acct_f", "acct_e", "acct_c"),
        "partialRefunds": ("keep", "revoke", "keep"), "legacyReceipts": ("refuse", "accept", "refuse"),
        "trustedProxies": (["192.0.2.1", "192.0.2.2"], ["192.0.2.3", "2001:db8::4"], ["192.0.2.5"]), "tokenKey": ("c2VjcmV0", "c2VjcmV0", ""),
    ]

    static func printed(_ arguments: [String], environment: [String: String]) async throws -> [String: Any] {
        let run = try await CofferExecutable.run(["serve", "--print-config"] + arguments, environment: environment)
        #expect(run.status == 0, "\(run.stderr)")
        return try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
    }

    /// `--print-config` shows each sample (the token key, a secret, only as a yes/no; the
    /// token key has no flag, so the flags' run still has the environment's).
    static func expect(
        _ printed: [String: Any], _ pick: ((flag: any Sendable, environment: any Sendable, file: any Sendable)) -> any Sendable, from layer: String
    ) {
        for setting in CofferSetting.all where setting != .config && setting != .tokenKey {
            let expected = samples[setting.key].map(pick)
            #expect("\(String(describing: printed[setting.key]))" == "\(String(describing: expected))", "\(setting.key) from \(layer)")
        }
        let tokenKey = samples[CofferSetting.tokenKey.key].map(pick) as? String
        #expect(printed["tokenKeyFromEnvironment"] as? Bool == !(tokenKey ?? "").isEmpty, "tokenKey from \(layer)")
    }

    @Test func everyOptionFromEachDocumentedForm() async throws {
        try await withTemporaryDirectory(prefix: "coffer-table") { directory in
            let file = directory.appendingPathComponent("coffer.json")
            let fileValues = Self.samples.filter { CofferSetting.configFileKeys.contains($0.key) }.mapValues(\.file)
            try JSONSerialization.data(withJSONObject: fileValues).write(to: file)
            var environment = ["COFFER_CONFIG": file.path]
            var flags: [String] = []
            for setting in CofferSetting.all where setting != .config {
                let (flag, variable) = try #require(Self.samples[setting.key].map { ($0.flag, $0.environment) }, "no sample for \(setting.key)")
                environment[setting.environmentVariable] = (variable as? [String])?.joined(separator: ",") ?? "\(variable)"
                guard let name = setting.flag else { continue }
                for value in (flag as? [String]) ?? ["\(flag)"] { flags += [name, value] }
            }
            Self.expect(try await Self.printed(["--config", file.path], environment: [:]), \.file, from: "the config file")
            Self.expect(try await Self.printed([], environment: environment), \.environment, from: "the environment")
            Self.expect(try await Self.printed(flags, environment: environment), \.flag, from: "the flags")
        }
    }

    /// Nothing set: each setting shows the README's default, or nothing where the README has none.
    @Test func defaultsAreTheReadmeDefaults() async throws {
        let printed = try await Self.printed([], environment: [:])
        for row in try Self.readmeRows() {
            guard let key = row.key, let value = printed[key] else { continue }
            if value is NSNull || (value as? [Any])?.isEmpty == true { continue }
            #expect("\(value)" == row.defaultValue, "\(key): printed \(value), README \(row.defaultValue ?? "—")")
        }
        #expect(printed["tokenKeyFromEnvironment"] as? Bool == false)
    }
}
