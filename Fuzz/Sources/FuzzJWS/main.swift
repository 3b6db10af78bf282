import CofferCore
import Dispatch
import Foundation

// Compact JWS → header JSON, x5c certificates, ES256 signature, payload JSON and, for
// notifications, the nested JWS — through the public verifier with Apple's roots.
let verifier = AppStoreVerifier(
    configuration: VerifierConfiguration(anchors: (try? TrustAnchor.appleRoots(allowSandbox: true)) ?? [], bundleIds: nil))
let now = Date(timeIntervalSince1970: 1_760_000_000)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    let done = DispatchSemaphore(value: 0)
    Task {
        _ = await verifier.verifySignedData(text, now: now)
        done.signal()
    }
    done.wait()
    return 0
}

// SwiftPM links an executable's entry point as `FuzzJWS_main`; hand control to libFuzzer's driver.
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt
) -> CInt

@_cdecl("FuzzJWS_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc
    var argv = argv
    _ = verifier  // initialised before the first input, not attributed to it
    return LLVMFuzzerRunDriver(&argc, &argv, fuzz)
}
