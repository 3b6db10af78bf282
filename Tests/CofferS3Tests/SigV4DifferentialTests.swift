import CofferTestSupport
import Foundation
import Testing

@testable import CofferS3

/// ``SigV4Signer`` against botocore's own S3 signers (`Differential/botocore_sign.py`) on
/// generated requests: odd and unicode keys, spaces, repeated query names, empty values,
/// header values with runs of spaces and tabs, empty payloads and payload hashes as given, session tokens,
/// secrets with `+` and `/`, presigned URLs. Seeded: the same requests every run.
///
/// Needs botocore (PyPI) in `.build-venv` (`.ci/run` makes it) or the Python named by
/// `COFFER_TEST_BOTOCORE_PYTHON`; without it the test fails, saying how to install it.
@Suite("SigV4: the same signatures as botocore")
struct SigV4DifferentialTests {
    struct Request: Codable {
        var method: String
        var host: String
        var path: String
        var query: [[String]]
        var headers: [[String]]
        var payload: String
        var date: Int
        var access: String
        var secret: String
        var token: String?
        var region: String
        var expires: Int?
    }

    struct Result: Codable {
        var authorization: String?
        var query: String?
        /// botocore's canonical request (header signing), shown when the signatures differ.
        var canonical: String?
    }

    static let pieces = [
        "levels", "a b", "é", "日本語", "🎮", "x+y", "100%", "q?x", "h#1", "a=b&c", "(1)", "*", "~tilde", "semi;colon", "comma,", "at@",
        "dollar$", "'quote'", "[br]", "sp  two", "dot.", "-_", "plus+ space", "%41", "\u{00A0}nbsp",
    ]

    static func generate(count: Int, seed: UInt64) -> [Request] {
        var rng = SplitMix64(state: seed)
        let payloads = [SigV4Signer.emptyPayload, SigV4Signer.unsignedPayload, SigV4Signer.hexSHA256(Data("x".utf8))]
        return (0..<count).map { i in
            func piece() -> String { pieces.randomElement(using: &rng) ?? "p" }
            let key = (0..<Int.random(in: 1...4, using: &rng)).map { _ in piece() }.joined(separator: Bool.random(using: &rng) ? "/" : "//")
            let presign = i % 4 == 3
            var query: [[String]] = []
            var names: Set<String> = []
            for _ in 0..<Int.random(in: 0...3, using: &rng) {
                let name =
                    ["uploadId", "partNumber", "response-content-type", "response-content-disposition", "x-id", piece()]
                    .randomElement(using: &rng) ?? "x"
                // A presigned URL's parameters are a dictionary in botocore: no repeated names there.
                if presign && !names.insert(name).inserted { continue }
                query.append([name, Bool.random(using: &rng) ? "" : piece() + piece()])
            }
            var headers: [[String]] = [["Host", "bucket-\(i % 7).s3.eu-west-3.amazonaws.com"]]
            if !presign {
                for n in 0..<Int.random(in: 0...3, using: &rng) {
                    let value = ["  padded  ", "two  spaces", "tab\there", "utf8 é", "a,b", ""].randomElement(using: &rng) ?? ""
                    headers.append([["x-amz-meta-k\(n)", "Content-Type", "X-Amz-Meta-Same", "range"].randomElement(using: &rng) ?? "x", value])
                }
            }
            return Request(
                method: ["GET", "PUT", "POST", "DELETE", "HEAD"].randomElement(using: &rng) ?? "GET", host: headers[0][1],
                path: "/bucket-\(i % 7)/" + key, query: query, headers: headers, payload: payloads.randomElement(using: &rng) ?? "",
                date: Int.random(in: 1_300_000_000...2_000_000_000, using: &rng), access: "AKID\(i)EXAMPLE",
                secret: ["wJalr/K7MDENG+bPxRfi", "s3cr3t", "a+b/c=d==", "é-secret"].randomElement(using: &rng) ?? "s",
                token: Bool.random(using: &rng) ? "FwoGZXIvYXdzE//token+with/slashes=" : nil,
                region: ["us-east-1", "eu-west-3", "auto"].randomElement(using: &rng) ?? "us-east-1",
                expires: presign ? Int.random(in: 1...604_800, using: &rng) : nil)
        }
    }

    static var python: String {
        get throws {
            if let configured = ProcessInfo.processInfo.environment["COFFER_TEST_BOTOCORE_PYTHON"] { return configured }
            let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            let venv = repo.appendingPathComponent(".build-venv/bin/python3").path
            guard FileManager.default.isExecutableFile(atPath: venv) else {
                throw Missing(
                    description:
                        "botocore is needed: python3 -m venv .build-venv && .build-venv/bin/pip install botocore (or set COFFER_TEST_BOTOCORE_PYTHON)"
                )
            }
            return venv
        }
    }

    struct Missing: Error, CustomStringConvertible { var description: String }

    @Test("400 generated requests: every Authorization header and presigned query is botocore's")
    func sameAsBotocore() throws {
        let requests = Self.generate(count: 400, seed: 0xC0FFEE)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sigv4-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let input = directory.appendingPathComponent("requests.json")
        let output = directory.appendingPathComponent("results.json")
        try JSONEncoder().encode(requests).write(to: input)
        FileManager.default.createFile(atPath: output.path, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try Self.python)
        process.arguments = [
            URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Differential/botocore_sign.py").path, input.path,
        ]
        process.standardOutput = try FileHandle(forWritingTo: output)
        try process.run()
        process.waitUntilExit()
        try #require(process.terminationStatus == 0, "botocore_sign.py failed")
        let results = try JSONDecoder().decode([Result].self, from: try Data(contentsOf: output))
        try #require(results.count == requests.count)
        for (request, expected) in zip(requests, results) {
            let signer = SigV4Signer(
                credentials: S3Credentials(accessKeyId: request.access, secretAccessKey: request.secret, sessionToken: request.token),
                region: request.region)
            let date = Date(timeIntervalSince1970: TimeInterval(request.date))
            let query = request.query.map { ($0[0], $0[1]) }
            if let expires = request.expires {
                let ours = signer.presignedQuery(
                    method: request.method, path: request.path, query: query, host: request.host, expires: expires, date: date)
                #expect(Self.sorted(ours) == Self.sorted(expected.query ?? ""), "\(request)")
            } else {
                let headers = signer.sign(
                    method: request.method, path: request.path, query: query, headers: request.headers.map { ($0[0], $0[1]) },
                    payloadSHA256: request.payload, date: date)
                let signed = headers.filter { $0.0 != "Authorization" }
                let ours = SigV4Signer.canonicalRequest(
                    method: request.method, path: request.path, query: SigV4Signer.canonicalQuery(query),
                    headers: SigV4Signer.canonicalHeaders(request.headers.map { ($0[0], $0[1]) } + signed), payloadSHA256: request.payload)
                #expect(
                    headers.first { $0.0 == "Authorization" }?.1 == expected.authorization, "ours:\n\(ours)\nbotocore's:\n\(expected.canonical ?? "")"
                )
            }
        }
    }

    /// A query string's parameters in order (botocore puts the request's own first).
    static func sorted(_ query: String) -> [String] { query.split(separator: "&").map(String.init).sorted() }
}
