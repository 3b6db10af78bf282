import CofferCore
import Foundation
import FuzzSupport

// PKCS#7/BER envelope → certificates → chain → payload, through the public verifier, trusting
// Apple's roots for every environment they may vouch for. Crashes, hangs and memory errors are
// the findings (a mutated envelope may stay valid: BER has several encodings of one content).
let verifier = AppStoreVerifier(
    configuration: VerifierConfiguration(anchors: (try? TrustAnchor.appleRoots(allowSandbox: true)) ?? [], bundleIds: nil))
let now = Date(timeIntervalSince1970: 1_700_000_000)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    blocking { _ = await verifier.verify(bytes, now: now) }
    return 0
}

@_cdecl("FuzzReceipt_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    _ = verifier  // initialised before the first input, not attributed to it
    return runLibFuzzer(argc, argv, fuzz)
}
