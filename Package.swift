// swift-tools-version: 6.1
import PackageDescription

let package = Package(
    name: "Coffer",
    // macOS 15: swift-configuration's `ConfigReader` (Configuration 1.0) needs it.
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "coffer", targets: ["coffer"]),
        .library(name: "CofferCore", targets: ["CofferCore"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/ordo-one/benchmark.git", from: "1.38.1", traits: ["MallocInterposer"]),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1", traits: ["FullFoundation"]),
        // Its default trait, JSON, gives the config file's provider (Hummingbird resolves it with no traits).
        .package(url: "https://github.com/apple/swift-configuration.git", from: "1.4.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.3"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        // Hummingbird's own dependency: NIOHTTPTypes names the HTTP parts a channel handler sees.
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.8.0"),
    ],
    targets: [
        .target(
            name: "CofferCore",
            dependencies: [
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Crypto", package: "swift-crypto"),
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
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        // S3-compatible object storage: AWS Signature Version 4 on swift-crypto (no S3 SDK is mirrored).
        .target(
            name: "CofferS3",
            dependencies: [
                "CofferCore",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        // PostgreSQL: every repository of CofferCore on postgres-nio, for instances that share one ledger.
        .target(
            name: "CofferPostgres",
            dependencies: [
                "CofferCore",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        // The HTTP layer: controllers over the storage seams of CofferCore; names no backend.
        .target(
            name: "CofferServer",
            dependencies: [
                "CofferCore",
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "_NIOFileSystem", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // The composition root: picks the storage implementations and hands the server their protocols.
        .target(
            name: "CofferApp",
            dependencies: [
                "CofferCore",
                "CofferServer",
                "CofferStore",
                "CofferPostgres",
                "CofferS3",
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // A client of a running server's admin and audit API (`coffer admin`, `coffer audit`) and the
        // release sync that `coffer admin sync` and the demo share.
        .target(
            name: "CofferClient",
            dependencies: [
                "CofferCore",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        // Test doubles: in-memory implementations of every storage protocol; helpers shared by the test targets.
        .target(
            name: "CofferTestSupport",
            dependencies: ["CofferCore", "CofferS3", .product(name: "Crypto", package: "swift-crypto")]
        ),
        .executableTarget(
            name: "coffer",
            dependencies: [
                "CofferCore",
                "CofferSandbox",
                "CofferStore",
                "CofferServer",
                "CofferApp",
                "CofferClient",
                "CofferPostgres",
                "CofferS3",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The CLI tests run the built `coffer` executable: the dependency makes `swift test` build it.
        .testTarget(
            name: "CofferCoreTests",
            dependencies: ["CofferCore", "CofferSandbox", "CofferTestSupport", "coffer", .product(name: "Crypto", package: "swift-crypto")],
            resources: [.copy("Fixtures")]
        ),
        .testTarget(
            name: "CofferS3Tests",
            dependencies: [
                "CofferCore", "CofferS3", "CofferStore", "CofferTestSupport", "coffer", .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"), .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            // Run from its source path by SigV4DifferentialTests, not a resource of the bundle.
            exclude: ["Differential/botocore_sign.py"]
        ),
        .testTarget(
            name: "CofferStoreTests",
            dependencies: ["CofferCore", "CofferStore", "CofferTestSupport", .product(name: "GRDB", package: "GRDB.swift")]
        ),
        // One contract, every backend: the same tests over the in-memory and the SQLite
        // implementation of each storage protocol (a new backend adds a `Backend` case).
        .testTarget(
            name: "CofferContractTests",
            dependencies: [
                "CofferCore", "CofferStore", "CofferPostgres", "CofferS3", "CofferTestSupport", .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "CofferServerTests",
            dependencies: [
                "CofferCore", "CofferStore", "CofferServer", "CofferApp", "CofferClient", "CofferSandbox", "CofferS3", "CofferTestSupport", "coffer",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
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
