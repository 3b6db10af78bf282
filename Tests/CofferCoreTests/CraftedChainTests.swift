import CofferCore
import Foundation
import Testing

/// Receipts crafted to make chain building expensive (`Fixtures/crafted/make.sh`): anyone can
/// post them, so each must be refused before the costly work, with a precise reason.
@Suite struct CraftedChainTests {
    /// Seven CA certificates named alike, each able to issue the others: a path builder
    /// handed all of them tried every ordering (13,699 RSA verifications, ~0.25 s of CPU per
    /// request with 2048-bit keys and ~11 s with 15360-bit ones). The receipt's certificates
    /// must form one path: a certificate whose issuer two of them could be is refused.
    /// The eight certificates of that maze are refused by their count (at most five, before
    /// any is parsed); four of them with the leaf by the rule.
    @Test func certificatesThatCouldIssueEachOtherAreRefusedBeforeAnyPathIsTried() async throws {
        let receipt = try Fixtures.bytes("crafted/issuer-maze-4.der")
        let eight = try Fixtures.bytes("crafted/issuer-maze.der")
        for verifier in [try appleVerifier(), try sandboxVerifier(bundleIds: nil)] {
            let result = await verifier.verify(receipt, now: testNow)
            expectInvalid(result, .chainUntrusted)
            #expect(result.error?.detail.contains("4 certificates in the receipt could have issued leaf") == true, "\(result)")
            let refused = await verifier.verify(eight, now: testNow)
            expectInvalid(refused, .limitExceeded)
            #expect(refused.error?.detail.contains("more than 5 certificates") == true, "\(refused)")
        }
    }

    /// An 8192-bit RSA key costs ~16 times one of Apple's 2048-bit keys to verify with, and
    /// BoringSSL accepts up to 16384 bits: refused on sight, before any signature check.
    @Test func anRSAKeyOverFourThousandNinetySixBitsIsRefusedOnSight() async throws {
        let receipt = try Fixtures.bytes("crafted/rsa8192-signer.der")
        let verifier = try appleVerifier()
        let result = await verifier.verify(receipt, now: testNow)
        expectInvalid(result, .malformed)
        #expect(result.error?.detail.contains("8192-bit RSA key") == true, "\(result)")
        // A root the operator configures (`--root`) may have any size: the limit is for what anyone can post.
        let root = try TrustAnchor.custom(Fixtures.bytes("crafted/rsa8192-cert.der"), environments: [.sandbox], requireAppleExtensions: false)
        #expect(root.environments == [.sandbox])
        // …and so is its copy in what is posted (a JWS's x5c[2], a receipt's root): the chain
        // is judged, not the key's size.
        let trusting = AppStoreVerifier(configuration: VerifierConfiguration(anchors: [root], bundleIds: nil))
        let judged = await trusting.verify(receipt, now: testNow)
        #expect(judged.error?.detail.contains("bit RSA key") == false, "\(judged)")
    }
}
