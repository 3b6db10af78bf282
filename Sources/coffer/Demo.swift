import CofferApp
import CofferClient
import CofferCore
import CofferSandbox
import CofferServer
import CofferStore
import Foundation
import Logging

/// `coffer serve --demo`: a sandbox CA, the catalogue in content/, an admin and an auditor
/// key (created once, reused on every restart), and a copy-paste walk-through printed to the
/// terminal.
enum Demo {
    static let bundleId = "com.coffer.demo"

    /// Loads the sandbox CA in `dir`, creating it on first use.
    static func sandbox(at dir: SandboxDirectory) throws -> SandboxCA {
        let fm = FileManager.default
        if fm.fileExists(atPath: dir.file(SandboxCA.FileName.root)) {
            return try SandboxCA.load { name in try IO.read(dir.file(name)) }
        }
        try fm.createDirectory(atPath: dir.path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let ca = try SandboxCA.create(now: Date())
        for (name, bytes) in try ca.files() {
            try IO.write(bytes, to: dir.file(name), mode: name.hasSuffix("key.pem") ? 0o600 : 0o644)
        }
        return ca
    }

    /// The demo keys' secrets, kept beside the sandbox CA (0600) so that a restart reuses them:
    /// only their hashes are in the database, so they could not be shown again otherwise.
    struct DemoKeys: Codable {
        var admin: String
        var auditor: String
    }

    /// The demo admin and auditor keys: those saved in `DATA/sandbox/demo-keys.json` while each
    /// still hashes to a live key of its role; otherwise a new key for that role, saved. So
    /// restarts leave exactly one live demo key per role — the one printed. Returns whether
    /// any key was created.
    ///
    /// Keys made before the file existed (by an older Coffer, or if the file was deleted) cannot
    /// be found again — only their hashes are stored — so they are not revoked here: `reused`
    /// says the data directory was used before, and then a warning says so.
    static func demoKeys(_ services: any CofferStorage, reused: Bool, logger: Logger) async throws -> (keys: DemoKeys, created: Bool) {
        let path = DataDirectory(services.configuration.dataDirectory).sandbox.demoKeys
        var saved: DemoKeys?
        if FileManager.default.fileExists(atPath: path) {
            saved = try? JSONDecoder().decode(DemoKeys.self, from: Data(try IO.read(path)))
            if saved == nil { logger.warning("\(path) is not a demo key file: creating new demo keys") }
        } else if reused {
            logger.warning(
                "\(path) is missing: creating new demo keys; demo keys printed by earlier runs stay valid until revoked (coffer keys revoke)")
        }
        let signer = services.ledgerSigner
        func live(_ secret: String?, _ role: Role) async throws -> APIKey? {
            guard let secret, let key = try await services.keyRepository.key(secretHash: APIKeys.hash(secret)), key.revokedAt == nil,
                key.isAuthentic(signedBy: signer.publicKey)
            else { return nil }
            return key.role == role ? key : nil
        }
        func kept(_ secret: String?, _ role: Role, name: String) async throws -> (String, Bool) {
            if let secret, try await live(secret, role) != nil { return (secret, false) }
            // A saved secret of the wrong role (an edited file) must not stay live unnoticed.
            if let secret, let key = try await services.keyRepository.key(secretHash: APIKeys.hash(secret)), key.revokedAt == nil {
                _ = try await services.keyRepository.revoke(keyId: key.keyId, at: Date())
            }
            return (try await APIKeys.create(role: role, name: name, in: services.keyRepository, signer: signer, now: Date()), true)
        }
        let (admin, newAdmin) = try await kept(saved?.admin, .admin, name: "demo admin")
        let (auditor, newAuditor) = try await kept(saved?.auditor, .auditor, name: "demo auditor")
        let keys = DemoKeys(admin: admin, auditor: auditor)
        if newAdmin || newAuditor { try writePrivate(try JSONEncoder().encode(keys), to: path) }
        return (keys, newAdmin || newAuditor)
    }

    /// Writes `data` to `path` atomically, created 0600 from the start (never readable by others).
    static func writePrivate(_ data: Data, to path: String) throws {
        let temporary = path + ".tmp-\(ProcessInfo.processInfo.processIdentifier)"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw UsageError("cannot create \(temporary)") }
        do {
            let handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
            try handle.write(contentsOf: data)
            try handle.synchronize()
            try handle.close()
            guard rename(temporary, path) == 0 else { throw UsageError("cannot rename \(temporary) to \(path)") }
        } catch {
            unlink(temporary)
            throw UsageError("cannot write \(path): \(error)")
        }
    }

    /// The server's own repositories as a release target: the demo catalogue loads through
    /// the same plan as `coffer admin sync` (only changed files become new versions).
    struct LocalTarget: CatalogueTarget {
        let services: any CofferStorage

        func assets() async throws -> [Asset] { try await services.catalogue.assets() }
        func products() async throws -> [Product] { try await services.catalogue.products() }
        func upload(_ asset: ReleaseManifest.AssetEntry, file: String, name: String, sha256: [UInt8], size: Int64) async throws {
            let bytes = try IO.read(file)
            let stored = try await services.content.write(
                AsyncStream {
                    $0.yield(bytes)
                    $0.finish()
                }, maxBytes: services.configuration.uploadLimit, expectedSHA256: Hex.encode(sha256))
            _ = try await services.catalogue.addAssetVersion(
                assetId: asset.assetId, name: name, contentType: asset.contentType ?? MediaType.forUpload(fileName: name), size: stored.size,
                sha256: stored.sha256, at: Date(), logging: { Self.entry(.assetUpload, target: $0.assetId, detail: CatalogueLog.uploadDetail($0)) })
        }
        func put(_ p: ProductSpec) async throws {
            let product = Product(
                productId: p.productId, bundleId: p.bundleId, type: p.type, assetIds: p.assetIds, title: p.title, updatedAt: Date(),
                familyShareable: p.familyShareable, durationSeconds: p.durationSeconds)
            try await services.catalogue.putProduct(
                product, logging: Self.entry(.productPut, target: p.productId, detail: CatalogueLog.productDetail(product)))
        }
        func deleteProduct(_ productId: String) async throws {
            _ = try await services.catalogue.deleteProduct(productId, logging: Self.entry(.productDelete, target: productId, detail: ""))
        }

        /// The seed's admin-log entry: every catalogue row is backed by the log, the demo's too.
        static func entry(_ action: AdminActionName, target: String, detail: String) -> AdminAction {
            AdminAction(
                at: Date(), keyId: "demo", keyName: "coffer serve --demo", action: action, target: target, detail: detail, clientAddress: "local")
        }
    }

    static func prepare(_ services: any CofferStorage, contentDirectory: String, logger: Logger) async throws {
        let manifest: ReleaseManifest
        do { manifest = try ReleaseManifest.load(directory: contentDirectory) } catch {
            throw UsageError("demo catalogue: \(error) (run from the repository root or pass --content DIR)")
        }
        let target = LocalTarget(services: services)
        let plan = try await ContentSync.plan(manifest, directory: contentDirectory, target: target, prune: false)
        try await ContentSync.apply(plan, target: target)
        let reused = !plan.unchangedAssets.isEmpty || plan.uploads.contains { $0.current != nil }
        let (keys, created) = try await demoKeys(services, reused: reused, logger: logger)
        let admin = keys.admin
        let auditor = keys.auditor
        // Absolute, so the walkthrough works pasted in any directory.
        let data = URL(fileURLWithPath: services.configuration.dataDirectory).standardizedFileURL.path
        let sandbox = DataDirectory(data).sandbox
        let base = "http://\(services.configuration.host):\(services.configuration.port)"
        let me =
            CommandLine.arguments.first.map { ($0 as NSString).isAbsolutePath ? $0 : FileManager.default.currentDirectoryPath + "/" + $0 } ?? "coffer"
        // Written unbuffered: the banner must show even when stdout is a pipe or a file.
        FileHandle.standardOutput.write(
            Data(
                """

                ── Coffer demo ────────────────────────────────────────────────────────────
                data directory: \(data)    sandbox CA: \(sandbox.path) (trusted for LocalTesting only)
                catalogue: \(manifest.products.map(\.productId).joined(separator: ", "))
                admin key:   \(admin)
                auditor key: \(auditor)
                (\(created ? "new keys, saved" : "the same keys as last time, from") \(sandbox.demoKeys))

                Try it from another terminal (copy-paste):

                  COFFER=\(me)
                  T=$(date +%s)$RANDOM    # fresh transaction ids: paste this again and again
                  # 1. mint a sandbox receipt for level pack 1, transaction $T
                  R=$($COFFER sandbox receipt --dir \(sandbox.path) --bundle-id \(manifest.bundleId) --purchase com.coffer.demo.levelpack1:$T --base64)
                  # 2. redeem it: 201 with download URLs
                  curl -s -X POST \(base)/v1/redemptions -H 'Content-Type: application/json' -d "{\\"receipt\\":\\"$R\\"}" | tee /tmp/coffer-redemption.json; echo
                  # 3. download the first level file
                  curl -s "\(base)$(grep -o '"url":"[^"]*"' /tmp/coffer-redemption.json | head -1 | cut -d'"' -f4)"; echo
                  # 4. replay the same receipt: 409 alreadyRedeemed
                  curl -s -X POST \(base)/v1/redemptions -H 'Content-Type: application/json' -d "{\\"receipt\\":\\"$R\\"}"; echo
                  # 5. the auditor sees the redemption and the refused replay
                  curl -s -H 'Authorization: Bearer \(auditor)' \(base)/v1/audit/attempts; echo
                  # 6. a season pass (auto-renewable, paid for the next hour): 201, entitlementEndsAt in an hour
                  S=$($COFFER sandbox transaction --dir \(sandbox.path) --bundle-id \(manifest.bundleId) --product com.coffer.demo.season1 --product-type autoRenewable --transaction-id ${T}5 --expires-in 3600)
                  curl -s -X POST \(base)/v1/redemptions -H 'Content-Type: application/json' -d "{\\"signedTransaction\\":\\"$S\\"}"; echo
                  # 7. Apple renews it for a month (DID_RENEW): the pass now runs 30 days
                  N=$($COFFER sandbox notification --dir \(sandbox.path) --type DID_RENEW --bundle-id \(manifest.bundleId) --product com.coffer.demo.season1 --product-type autoRenewable --transaction-id ${T}6 --original-transaction-id ${T}5 --expires-in 2592000)
                  curl -s -X POST \(base)/v1/notifications -H 'Content-Type: application/json' -d "{\\"signedPayload\\":\\"$N\\"}"; echo
                ────────────────────────────────────────────────────────────────────────────

                """.utf8))
        logger.info("demo catalogue loaded", metadata: ["products": "\(manifest.products.count)", "assets": "\(manifest.assets.count)"])
    }
}
