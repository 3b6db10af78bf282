import CofferCore
import Crypto
import Foundation
import FuzzSupport

// Download tokens: "v1.<kid>.<base64url payload>.<base64url HMAC>". The key is fixed so the
// seeds (minted by Fuzz/run.sh with the same key) are valid and the fuzzer reaches the
// payload parser behind the MAC check.
let signer = TokenSigner(
    active: TokenKey(id: "k1", key: SymmetricKey(data: Array("coffer-fuzz-token-key-0123456789".utf8))),
    retired: [TokenKey(id: "old", key: SymmetricKey(data: Array("coffer-fuzz-retired-key-01234567".utf8)))])
let now = Date(timeIntervalSince1970: 1_700_000_000)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    if let claims = try? signer.verify(text, now: now) {
        // Whatever verifies must re-mint to the same token (no two encodings of one claim).
        precondition(signer.mint(claims) == text || !text.hasPrefix("v1.k1."), "a second encoding of a token verified")
    }
    return 0
}

@_cdecl("FuzzToken_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    _ = signer  // initialised before the first input, not attributed to it
    return runLibFuzzer(argc, argv, fuzz)
}
