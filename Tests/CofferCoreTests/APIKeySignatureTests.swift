import CofferCore
import Crypto
import Foundation
import Testing

/// What the ledger key signs for an API key, and what the server then accepts.
@Suite struct APIKeySignatureTests {
    static let signer = LedgerSigner(privateKey: Curve25519.Signing.PrivateKey())
    static let key = APIKey(
        keyId: "k-1", name: "Ops\nrole=admin", role: .auditor, secretHash: String(repeating: "ab", count: 32),
        createdAt: Date(timeIntervalSince1970: 1_764_000_000.1234))

    @Test func theSignedBytesAreLengthPrefixedFields() {
        let expected =
            "coffer-api-key-v1\nkeyId=3:k-1\nname=14:Ops\nrole=admin\nrole=7:auditor\nsecretHash=64:\(String(repeating: "ab", count: 32))\ncreatedAtMs=13:1764000000123\n"
        #expect(String(decoding: Self.key.signedBytes, as: UTF8.self) == expected)
    }

    @Test func aSignedKeyVerifiesAndAnyChangeToItDoesNot() throws {
        let signed = try Self.signer.signed(Self.key)
        #expect(signed.signature != nil)
        #expect((signed.createdAt.timeIntervalSince1970 * 1000).rounded() == 1_764_000_000_123)
        #expect(signed.isAuthentic(signedBy: Self.signer.publicKey))
        // Stored as unix seconds and read back: still the same millisecond.
        var stored = signed
        stored.createdAt = Date(timeIntervalSince1970: signed.createdAt.timeIntervalSince1970)
        stored.revokedAt = Date()
        #expect(stored.isAuthentic(signedBy: Self.signer.publicKey), "the revocation is not signed")

        var changes: [APIKey] = []
        for change in 0..<6 {
            var k = signed
            switch change {
            case 0: k.role = .admin
            case 1: k.name = "Ops"
            case 2: k.keyId = "k-2"
            case 3: k.secretHash = String(repeating: "cd", count: 32)
            case 4: k.createdAt = signed.createdAt.addingTimeInterval(0.001)
            default: k.signature = nil
            }
            changes.append(k)
        }
        for k in changes { #expect(!k.isAuthentic(signedBy: Self.signer.publicKey), "\(k)") }
        let stranger = Curve25519.Signing.PrivateKey().publicKey
        #expect(!signed.isAuthentic(signedBy: stranger))
        var garbage = signed
        garbage.signature = "not base64 ***"
        #expect(!garbage.isAuthentic(signedBy: Self.signer.publicKey))
        #expect(!Self.key.isAuthentic(signedBy: Self.signer.publicKey), "an unsigned key is refused")
    }
}
