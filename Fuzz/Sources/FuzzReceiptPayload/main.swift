import CofferCore
import FuzzSupport

// The receipt payload (the ASN.1 SET of attributes inside the signed content), decoded
// directly: every attribute type, nested in-app records, dates, limits.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    _ = try? AppReceipt.decode(bytes[...])
    return 0
}

@_cdecl("FuzzReceiptPayload_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    return runLibFuzzer(argc, argv, fuzz)
}
