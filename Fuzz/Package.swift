// swift-tools-version: 6.1
// libFuzzer targets for Coffer's parsers. Build and run with Fuzz/run.sh (see Fuzz/README.md).
import PackageDescription

let fuzzer: [SwiftSetting] = [.unsafeFlags(["-parse-as-library"])]

let package = Package(
    name: "CofferFuzz",
    platforms: [.macOS(.v14)],
    dependencies: [.package(name: "Coffer", path: "..")],
    targets: [
        .target(name: "FuzzSupport"),
        .executableTarget(
            name: "FuzzReceipt", dependencies: ["FuzzSupport", .product(name: "CofferCore", package: "Coffer")], swiftSettings: fuzzer),
        .executableTarget(
            name: "FuzzReceiptPayload", dependencies: ["FuzzSupport", .product(name: "CofferCore", package: "Coffer")], swiftSettings: fuzzer),
        .executableTarget(name: "FuzzJWS", dependencies: ["FuzzSupport", .product(name: "CofferCore", package: "Coffer")], swiftSettings: fuzzer),
        .executableTarget(name: "FuzzToken", dependencies: ["FuzzSupport", .product(name: "CofferCore", package: "Coffer")], swiftSettings: fuzzer),
    ],
    swiftLanguageModes: [.v6]
)
