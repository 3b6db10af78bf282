import CofferCore
import Crypto
import Foundation
import Testing

/// Every input a fuzz target (Fuzz/) found, replayed: named `<target>-<what>` in
/// Fixtures/fuzz-regressions, each fed to the parser its target drives.
@Suite struct FuzzRegressionTests {
    static var inputs: [(name: String, bytes: [UInt8])] {
        get throws {
            let dir = try Fixtures.root.appendingPathComponent("fuzz-regressions")
            return try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted().map { name in
                (name, Array(try Data(contentsOf: dir.appendingPathComponent(name))))
            }
        }
    }

    /// The key of Fuzz/Sources/FuzzToken, so its findings carry valid MACs here too.
    static let fuzzSigner = TokenSigner(
        active: TokenKey(id: "k1", key: SymmetricKey(data: Array("coffer-fuzz-token-key-0123456789".utf8))),
        retired: [TokenKey(id: "old", key: SymmetricKey(data: Array("coffer-fuzz-retired-key-01234567".utf8)))])

    @Test func everyFindingIsRefusedWithoutACrash() async throws {
        let inputs = try Self.inputs
        try #require(!inputs.isEmpty)
        let verifier = AppStoreVerifier(configuration: VerifierConfiguration(anchors: try TrustAnchor.appleRoots(allowSandbox: true), bundleIds: nil))
        for (name, bytes) in inputs {
            switch name.split(separator: "-").first {
            case "FuzzToken":
                #expect(throws: TokenSigner.Failure.self, "\(name)") {
                    try Self.fuzzSigner.verify(String(decoding: bytes, as: UTF8.self), now: Date(timeIntervalSince1970: 1_700_000_000))
                }
            case "FuzzReceipt":
                #expect(!(await verifier.verify(bytes, now: Date())).isValid, "\(name)")
            case "FuzzJWS":
                #expect(!(await verifier.verifySignedData(String(decoding: bytes, as: UTF8.self), now: Date())).isValid, "\(name)")
            case "FuzzReceiptPayload":
                _ = try? AppReceipt.decode(bytes[...])
            default:
                Issue.record("\(name): unknown fuzz target prefix")
            }
        }
    }

    /// The property FuzzToken checks: a token that verifies is the one encoding of its claims.
    @Test func tokensHaveOneEncoding() throws {
        let claims = DownloadClaims(assetId: "level-1", sha256: String(repeating: "a", count: 64), redemptionId: "r-1", expiresAt: 1_800_000_000)
        let token = Self.fuzzSigner.mint(claims)
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        #expect(try Self.fuzzSigner.verify(token, now: now) == claims)
        #expect(Self.fuzzSigner.mint(try Self.fuzzSigner.verify(token, now: now)) == token)
    }

    /// Rotation: tokens of a retired key keep verifying; unknown key ids, other keys'
    /// MACs and any edited character never do.
    @Test func retiredKeysVerifyAndForgeriesDoNot() throws {
        let old = TokenKey(id: "k1", key: SymmetricKey(size: .bits256))
        let new = TokenKey(id: "k2", key: SymmetricKey(size: .bits256))
        let claims = DownloadClaims(assetId: "a", sha256: String(repeating: "b", count: 64), redemptionId: "r", expiresAt: 1_800_000_000)
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        let oldToken = TokenSigner(active: old).mint(claims)
        let rotated = TokenSigner(active: new, retired: [old])
        #expect(try rotated.verify(oldToken, now: now) == claims)
        #expect(rotated.mint(claims).hasPrefix("v1.k2."))
        #expect(throws: TokenSigner.Failure.invalid) { try TokenSigner(active: new).verify(oldToken, now: now) }
        let otherKeySameId = TokenSigner(active: TokenKey(id: "k1", key: SymmetricKey(size: .bits256)))
        #expect(throws: TokenSigner.Failure.invalid) { try otherKeySameId.verify(oldToken, now: now) }
        var bytes = Array(oldToken.utf8)
        for index in stride(from: 0, to: bytes.count, by: 7) {
            let original = bytes[index]
            bytes[index] = original == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
            #expect(throws: TokenSigner.Failure.self) { try rotated.verify(String(decoding: bytes, as: UTF8.self), now: now) }
            bytes[index] = original
        }
        #expect(throws: TokenSigner.Failure.expired) { try rotated.verify(oldToken, now: Date(timeIntervalSince1970: 1_900_000_000)) }
    }

    /// The shapes the parser must refuse before any MAC is computed: wrong part counts,
    /// versions, lengths, empty parts.
    @Test func malformedTokensAreInvalid() throws {
        let claims = DownloadClaims(assetId: "a", sha256: String(repeating: "b", count: 64), redemptionId: "r", expiresAt: 1_800_000_000)
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        let token = Self.fuzzSigner.mint(claims)
        let parts = token.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        try #require(parts.count == 4)
        let malformed = [
            "", ".", "...", "v1", "v1.k1", "v1.k1.\(parts[2])", token + ".", "." + token, token + "A", String(token.dropLast()),
            "v2." + parts[1...].joined(separator: "."), "V1." + parts[1...].joined(separator: "."),
            "v1..\(parts[2]).\(parts[3])", "v1.k1..\(parts[3])", "v1.k1.\(parts[2]).",
            token + String(repeating: "A", count: TokenSigner.maxTokenLength),
            "v1.k1.\(parts[2]).\(parts[3].dropLast())=",
        ]
        for text in malformed {
            #expect(throws: TokenSigner.Failure.invalid, "\(text)") { try Self.fuzzSigner.verify(text, now: now) }
        }
        // A bridged (non-native) string verifies like a native one.
        let bridged = NSString(string: token) as String
        #expect(try Self.fuzzSigner.verify(bridged, now: now) == claims)
    }
}
