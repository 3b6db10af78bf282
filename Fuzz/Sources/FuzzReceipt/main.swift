import CofferCore
import Dispatch
import Foundation

// PKCS#7/BER envelope → certificates → chain → payload, through the public verifier, trusting
// Apple's roots for every environment they may vouch for. A valid verdict on a mutated input
// is a finding too.
let verifier = AppStoreVerifier(
    configuration: VerifierConfiguration(anchors: (try? TrustAnchor.appleRoots(allowSandbox: true)) ?? [], bundleIds: nil))
let now = Date(timeIntervalSince1970: 1_700_000_000)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let done = DispatchSemaphore(value: 0)
    Task {
        _ = await verifier.verify(bytes, now: now)
        done.signal()
    }
    done.wait()
    return 0
}

// SwiftPM links an executable's entry point as `FuzzReceipt_main`; hand control to libFuzzer's driver.
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt
) -> CInt

@_cdecl("FuzzReceipt_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc
    var argv = argv
    _ = verifier  // initialised before the first input, not attributed to it
    return LLVMFuzzerRunDriver(&argc, &argv, fuzz)
}
