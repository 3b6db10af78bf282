import CofferCore
import CofferSandbox
import CofferServer
import CofferStore
import Foundation
import Logging

/// `coffer serve --demo`: a sandbox CA, the catalogue in content/, fresh keys, and a
/// copy-paste walk-through printed to the terminal.
enum Demo {
    static let bundleId = "com.coffer.demo"

    struct Manifest: Decodable {
        struct AssetEntry: Decodable {
            var assetId: String
            var file: String
            var name: String
            var contentType: String
        }
        struct ProductEntry: Decodable {
            var productId: String
            var type: ProductType
            var title: String
            var assetIds: [String]
        }
        var bundleId: String
        var assets: [AssetEntry]
        var products: [ProductEntry]
    }

    /// Loads the sandbox CA in `dir`, creating it on first use.
    static func sandbox(at dir: String) throws -> SandboxCA {
        let fm = FileManager.default
        if fm.fileExists(atPath: (dir as NSString).appendingPathComponent(SandboxCA.FileName.root)) {
            return try SandboxCA.load { name in try IO.read((dir as NSString).appendingPathComponent(name)) }
        }
        try fm.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let ca = try SandboxCA.create(now: Date())
        for (name, bytes) in try ca.files() {
            try IO.write(bytes, to: (dir as NSString).appendingPathComponent(name), mode: name.hasSuffix("key.pem") ? 0o600 : 0o644)
        }
        return ca
    }

    static func prepare(_ services: CofferServices, contentDirectory: String, logger: Logger) async throws {
        let manifestPath = (contentDirectory as NSString).appendingPathComponent("manifest.json")
        let manifest: Manifest
        do { manifest = try JSONDecoder().decode(Manifest.self, from: Data(try IO.read(manifestPath))) } catch {
            throw UsageError("demo catalogue \(manifestPath) does not load: \(error) (run from the repository root or pass --content)")
        }
        for entry in manifest.assets {
            let bytes = try IO.read((contentDirectory as NSString).appendingPathComponent(entry.file))
            let writer = try services.content.makeWriter(maxBytes: services.configuration.uploadLimit)
            try bytes.withUnsafeBytes { try writer.append($0) }
            let stored = try writer.finish(expectedSHA256: nil)
            if try await services.catalogue.asset(entry.assetId)?.sha256 != stored.sha256 {
                _ = try await services.catalogue.addAssetVersion(
                    assetId: entry.assetId, name: entry.name, contentType: entry.contentType, size: stored.size, sha256: stored.sha256, at: Date())
            }
        }
        for p in manifest.products {
            try await services.catalogue.putProduct(
                Product(productId: p.productId, bundleId: manifest.bundleId, type: p.type, assetIds: p.assetIds, title: p.title, updatedAt: Date()))
        }
        let admin = try await APIKeys.create(role: .admin, name: "demo admin", in: services.keys, now: Date())
        let auditor = try await APIKeys.create(role: .auditor, name: "demo auditor", in: services.keys, now: Date())
        let data = services.configuration.dataDirectory
        let base = "http://\(services.configuration.host):\(services.configuration.port)"
        let me =
            CommandLine.arguments.first.map { ($0 as NSString).isAbsolutePath ? $0 : FileManager.default.currentDirectoryPath + "/" + $0 } ?? "coffer"
        // Written unbuffered: the banner must show even when stdout is a pipe or a file.
        FileHandle.standardOutput.write(
            Data(
                """

                ── Coffer demo ────────────────────────────────────────────────────────────
                data directory: \(data)    sandbox CA: \(data)/sandbox (trusted for LocalTesting only)
                catalogue: \(manifest.products.map(\.productId).joined(separator: ", "))
                admin key:   \(admin)
                auditor key: \(auditor)

                Try it from another terminal (copy-paste):

                  COFFER=\(me)
                  # 1. mint a sandbox receipt for level pack 1, transaction 1000
                  R=$($COFFER sandbox receipt --dir \(data)/sandbox --bundle-id \(manifest.bundleId) --purchase com.coffer.demo.levelpack1:1000 --base64)
                  # 2. redeem it: 201 with download URLs
                  curl -s -X POST \(base)/v1/redemptions -H 'Content-Type: application/json' -d "{\\"receipt\\":\\"$R\\"}" | tee /tmp/coffer-redemption.json; echo
                  # 3. download the first level file
                  curl -s "\(base)$(grep -o '"url":"[^"]*"' /tmp/coffer-redemption.json | head -1 | cut -d'"' -f4)"; echo
                  # 4. replay the same receipt: 409 alreadyRedeemed
                  curl -s -X POST \(base)/v1/redemptions -H 'Content-Type: application/json' -d "{\\"receipt\\":\\"$R\\"}"; echo
                  # 5. the auditor sees the redemption and the refused replay
                  curl -s -H 'Authorization: Bearer \(auditor)' \(base)/v1/audit/attempts; echo
                ────────────────────────────────────────────────────────────────────────────

                """.utf8))
        logger.info("demo catalogue loaded", metadata: ["products": "\(manifest.products.count)", "assets": "\(manifest.assets.count)"])
    }
}
