// swift-tools-version: 6.1
import PackageDescription

let package = Package(
    name: "Coffer",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "coffer", targets: ["coffer"]),
        .library(name: "CofferCore", targets: ["CofferCore"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/ordo-one/benchmark.git", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        .target(
            name: "CofferCore",
            dependencies: [
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ]
        ),
        .target(
            name: "CofferSandbox",
            dependencies: [
                "CofferCore",
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ]
        ),
        .executableTarget(
            name: "coffer",
            dependencies: [
                "CofferCore",
                "CofferSandbox",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .testTarget(
            name: "CofferCoreTests",
            dependencies: ["CofferCore", "CofferSandbox"],
            resources: [.copy("Fixtures")]
        ),
        .executableTarget(
            name: "CofferBenchmarks",
            dependencies: [
                "CofferCore",
                "CofferSandbox",
                .product(name: "Benchmark", package: "benchmark"),
            ],
            path: "Benchmarks/CofferBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
