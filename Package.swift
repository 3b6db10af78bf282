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
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1", traits: ["FullFoundation"]),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.3"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
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
        .target(
            name: "CofferStore",
            dependencies: [
                "CofferCore",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "CofferServer",
            dependencies: [
                "CofferCore",
                "CofferStore",
                "CofferSandbox",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "_NIOFileSystem", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .executableTarget(
            name: "coffer",
            dependencies: [
                "CofferCore",
                "CofferSandbox",
                "CofferStore",
                "CofferServer",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .testTarget(
            name: "CofferCoreTests",
            dependencies: ["CofferCore", "CofferSandbox", .product(name: "Crypto", package: "swift-crypto")],
            resources: [.copy("Fixtures")]
        ),
        .testTarget(
            name: "CofferStoreTests",
            dependencies: ["CofferCore", "CofferStore"]
        ),
        .testTarget(
            name: "CofferServerTests",
            dependencies: [
                "CofferCore", "CofferStore", "CofferServer", "CofferSandbox",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ]
        ),
        .executableTarget(
            name: "CofferBenchmarks",
            dependencies: [
                "CofferCore",
                "CofferSandbox",
                "CofferStore",
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Benchmarks/CofferBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
