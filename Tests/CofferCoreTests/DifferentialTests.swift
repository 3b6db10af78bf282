import CofferCore
import CofferSandbox
import Foundation
import Testing

/// Our verdict must equal OpenSSL's `cms -verify` on the same bytes: an independent
/// implementation of CMS signature and chain checking.
@Suite struct OpenSSLDifferentialTests {
    struct Case: Sendable, CustomStringConvertible {
        var name: String
        var mutate: @Sendable ([UInt8]) -> [UInt8] = { $0 }
        var encoding = ReceiptEncoding()
        var description: String { name }
    }

    static func encoding(ber: Bool = false, digest: DigestAlgorithm = .sha256, signedAttributes: Bool = false, corrupt: Bool = false)
        -> ReceiptEncoding
    {
        var e = ReceiptEncoding()
        e.ber = ber
        e.digest = digest
        e.signedAttributes = signedAttributes
        e.corruptMessageDigest = corrupt
        return e
    }

    static func flip(_ needle: String, at delta: Int = 0) -> @Sendable ([UInt8]) -> [UInt8] {
        { bytes in
            var out = bytes
            let n = Array(needle.utf8)
            if let i = (0...(bytes.count - n.count)).first(where: { bytes[$0..<($0 + n.count)].elementsEqual(n) }) { out[i + delta] ^= 0x01 }
            return out
        }
    }

    static let cases: [Case] = [
        Case(name: "DER sha256"),
        Case(name: "DER sha1", encoding: encoding(digest: .sha1)),
        Case(name: "BER sha256", encoding: encoding(ber: true)),
        Case(name: "BER sha1", encoding: encoding(ber: true, digest: .sha1)),
        Case(name: "signed attributes", encoding: encoding(signedAttributes: true)),
        Case(name: "signed attributes, wrong messageDigest", encoding: encoding(signedAttributes: true, corrupt: true)),
        Case(name: "tampered content", mutate: flip("level.pack.1", at: 3)),
        Case(name: "tampered content (BER)", mutate: flip("level.pack.1", at: 3), encoding: encoding(ber: true)),
        Case(
            name: "tampered signature",
            mutate: {
                var b = $0; b[b.count - 20] ^= 0x01; return b
            }),
        Case(name: "tampered certificate", mutate: flip("Receipt Signing")),
    ]

    func openssl(_ arguments: [String]) throws -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["openssl"] + arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        return process.terminationStatus
    }

    func compare(_ receipt: [UInt8], trusting root: SandboxCA, verifierCA: SandboxCA, label: String) async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("coffer-diff-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let receiptURL = dir.appendingPathComponent("receipt.der")
        let rootURL = dir.appendingPathComponent("root.pem")
        try Data(receipt).write(to: receiptURL)
        try Data(try root.files()[SandboxCA.FileName.root] ?? []).write(to: rootURL)
        let status = try openssl([
            "cms", "-verify", "-inform", "DER", "-binary", "-in", receiptURL.path, "-CAfile", rootURL.path,
            "-purpose", "any", "-attime", String(Int(testNow.timeIntervalSince1970)), "-out", "/dev/null",
        ])
        let ours = try await sandboxVerifier(verifierCA).verify(receipt, now: testNow).isValid
        #expect(ours == (status == 0), "\(label): coffer \(ours ? "valid" : "invalid"), openssl exit \(status)")
    }

    @Test(arguments: cases)
    func verdictMatchesOpenSSL(_ c: Case) async throws {
        let receipt = c.mutate(try sharedCA.mintReceipt(demoReceipt(), now: testNow, encoding: c.encoding))
        try await compare(receipt, trusting: sharedCA, verifierCA: sharedCA, label: c.name)
    }

    @Test func wrongRootMatchesOpenSSL() async throws {
        let other = try SandboxCA.create(now: testNow)
        let receipt = try sharedCA.mintReceipt(demoReceipt(), now: testNow)
        try await compare(receipt, trusting: other, verifierCA: other, label: "wrong root")
    }

    @Test func theComparisonCanDisagree() async throws {
        // Guard against a vacuous test: OpenSSL does accept the valid receipt and reject the tampered one.
        let valid = try sharedCA.mintReceipt(demoReceipt(), now: testNow)
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("coffer-diff-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        try Data(valid).write(to: dir.appendingPathComponent("r.der"))
        try Data(Self.flip("level.pack.1", at: 3)(valid)).write(to: dir.appendingPathComponent("t.der"))
        try Data(try sharedCA.files()[SandboxCA.FileName.root] ?? []).write(to: dir.appendingPathComponent("root.pem"))
        let common = ["-inform", "DER", "-binary", "-CAfile", dir.appendingPathComponent("root.pem").path, "-purpose", "any", "-out", "/dev/null"]
        #expect(try openssl(["cms", "-verify", "-in", dir.appendingPathComponent("r.der").path] + common) == 0)
        #expect(try openssl(["cms", "-verify", "-in", dir.appendingPathComponent("t.der").path] + common) != 0)
    }
}
