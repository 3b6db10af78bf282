import CofferCore
import Foundation
import FuzzSupport

// Compact JWS → header JSON, x5c certificates, ES256 signature, payload JSON and, for
// notifications, the nested JWS — through the public verifier with Apple's roots.
let verifier = AppStoreVerifier(
    configuration: VerifierConfiguration(anchors: (try? TrustAnchor.appleRoots(allowSandbox: true)) ?? [], bundleIds: nil))
let now = Date(timeIntervalSince1970: 1_760_000_000)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    blocking { _ = await verifier.verifySignedData(text, now: now) }
    return 0
}

@_cdecl("FuzzJWS_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    _ = verifier  // initialised before the first input, not attributed to it
    return runLibFuzzer(argc, argv, fuzz)
}
