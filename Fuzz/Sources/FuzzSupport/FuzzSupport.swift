import Dispatch

// What every fuzz target shares: the hand-off to libFuzzer's driver, and a way to call the
// async verifier from libFuzzer's synchronous callback.

@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt
) -> CInt

/// SwiftPM links an executable's entry point as `<Target>_main`; each target defines that
/// symbol and calls this with its `LLVMFuzzerTestOneInput`.
public func runLibFuzzer(
    _ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?, _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt
) -> CInt {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv, callback)
}

/// Runs `body` to completion from synchronous code (libFuzzer calls targets synchronously).
public func blocking(_ body: @escaping @Sendable () async -> Void) {
    let done = DispatchSemaphore(value: 0)
    Task {
        await body()
        done.signal()
    }
    done.wait()
}
