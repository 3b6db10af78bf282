import CofferCore
import Crypto
import Foundation

/// A content release: the `content/` directory format. `manifest.json` names the app, the
/// assets (files beside it) and the products that unlock them.
public struct ReleaseManifest: Codable, Sendable {
    public struct AssetEntry: Codable, Sendable {
        public var assetId: String
        /// The file, relative to the manifest's directory.
        public var file: String
        /// The download file name clients see (default: the file's last path component).
        public var name: String?
        /// Default: the server's choice for the name's extension.
        public var contentType: String?
    }
    public struct ProductEntry: Codable, Sendable {
        public var productId: String
        public var type: ProductType
        public var title: String
        public var assetIds: [String]
        public var familyShareable: Bool?
        public var durationSeconds: Int64?
    }
    public var bundleId: String
    public var assets: [AssetEntry]
    public var products: [ProductEntry]

    /// Reads and checks `DIR/manifest.json`: every asset file inside DIR and readable, ids
    /// unique, every product's assets listed.
    public static func load(directory: String) throws -> ReleaseManifest {
        let path = (directory as NSString).appendingPathComponent("manifest.json")
        guard let data = FileManager.default.contents(atPath: path) else { throw ClientError.usage("cannot read \(path)") }
        let manifest: ReleaseManifest
        do { manifest = try JSONDecoder().decode(ReleaseManifest.self, from: data) } catch {
            throw ClientError.usage("\(path) is not a release manifest: \(error)")
        }
        func refuse(_ what: String) -> ClientError { .usage("\(path): \(Terminal.safe(what))") }
        func plainText(_ text: String, max: Int) -> Bool {
            (1...max).contains(text.utf8.count) && !text.unicodeScalars.contains { $0.properties.generalCategory == .control }
        }
        guard Identifier.isValid(manifest.bundleId) else { throw refuse("bundleId \(manifest.bundleId) is not an identifier") }
        var ids = Set<String>()
        for asset in manifest.assets {
            guard Identifier.isValid(asset.assetId) else { throw refuse("asset id \(asset.assetId) is not 1–128 characters of A–Z a–z 0–9 . _ -") }
            guard ids.insert(asset.assetId).inserted else { throw refuse("asset \(asset.assetId) is listed twice") }
            // The server's own rules: a release it would refuse halfway is refused here, whole.
            if let name = asset.name, let problem = UploadText.assetNameProblem(name) {
                throw refuse("asset \(asset.assetId): \(problem)")
            }
            if let type = asset.contentType, !UploadText.isMediaType(type) {
                throw refuse(
                    "asset \(asset.assetId): contentType must be a media type (type/subtype[; name=value]) of at most \(UploadText.maxMediaTypeLength) ASCII characters"
                )
            }
            let parts = asset.file.split(separator: "/")
            guard !asset.file.hasPrefix("/"), !parts.isEmpty, !parts.contains(where: { $0 == ".." || $0 == "." }) else {
                throw ClientError.usage("\(path): asset \(asset.assetId): file must be a relative path inside the directory")
            }
        }
        var products = Set<String>()
        for product in manifest.products {
            guard Identifier.isValid(product.productId) else { throw refuse("product id \(product.productId) is not an identifier") }
            guard plainText(product.title, max: 256) else {
                throw refuse("product \(product.productId): title must be 1–256 characters without control characters")
            }
            guard products.insert(product.productId).inserted else {
                throw ClientError.usage("\(path): product \(product.productId) is listed twice")
            }
            for id in product.assetIds where !ids.contains(id) {
                throw ClientError.usage("\(path): product \(product.productId) names asset \(id), which the manifest does not list")
            }
        }
        return manifest
    }
}

/// A product as a release defines it (what ``Product`` holds but its update time).
public struct ProductSpec: Sendable, Equatable {
    public var productId: String
    public var bundleId: String
    public var type: ProductType
    public var title: String
    public var assetIds: [String]
    public var familyShareable: Bool
    public var durationSeconds: Int64?

    public init(_ product: Product) {
        self.init(
            productId: product.productId, bundleId: product.bundleId, type: product.type, title: product.title, assetIds: product.assetIds,
            familyShareable: product.familyShareable, durationSeconds: product.durationSeconds)
    }

    public init(
        productId: String, bundleId: String, type: ProductType, title: String, assetIds: [String], familyShareable: Bool, durationSeconds: Int64?
    ) {
        self.productId = productId
        self.bundleId = bundleId
        self.type = type
        self.title = title
        self.assetIds = assetIds
        self.familyShareable = familyShareable
        self.durationSeconds = durationSeconds
    }

    /// The field-by-field changes from `old` to this, as `field: old → new`.
    func changes(from old: ProductSpec) -> [String] {
        var out: [String] = []
        if old.bundleId != bundleId { out.append("bundleId: \(old.bundleId) → \(bundleId)") }
        if old.type != type { out.append("type: \(old.type.rawValue) → \(type.rawValue)") }
        if old.title != title { out.append("title: \(Self.quoted(old.title)) → \(Self.quoted(title))") }
        if old.assetIds != assetIds {
            out.append("assets: \(old.assetIds.joined(separator: ", ")) → \(assetIds.joined(separator: ", "))")
        }
        if old.familyShareable != familyShareable { out.append("familyShareable: \(old.familyShareable) → \(familyShareable)") }
        if old.durationSeconds != durationSeconds {
            out.append("durationSeconds: \(old.durationSeconds.map(String.init) ?? "none") → \(durationSeconds.map(String.init) ?? "none")")
        }
        return out
    }

    static func quoted(_ text: String) -> String { "\"" + text + "\"" }
}

/// Where a release is published: a running server's admin API (`coffer admin sync`) or the
/// server's own repositories (`serve --demo` loads `content/` through the same plan).
public protocol CatalogueTarget: Sendable {
    /// The latest version of every asset.
    func assets() async throws -> [Asset]
    func products() async throws -> [Product]
    /// Stores `file` as a new version of the asset; its SHA-256 and size are already known.
    func upload(_ asset: ReleaseManifest.AssetEntry, file: String, name: String, sha256: [UInt8], size: Int64) async throws
    func put(_ product: ProductSpec) async throws
    func deleteProduct(_ productId: String) async throws
}

/// What a sync would change, computed by comparing the release with the target.
public struct SyncPlan: Sendable {
    public struct Upload: Sendable {
        public var entry: ReleaseManifest.AssetEntry
        public var file: String
        public var name: String
        public var sha256: [UInt8]
        public var size: Int64
        /// The version it replaces (nil: a new asset).
        public var current: Asset?
    }
    public enum ProductChange: Sendable {
        case add(ProductSpec)
        case change(ProductSpec, changes: [String])
    }
    public var uploads: [Upload] = []
    public var unchangedAssets: [String] = []
    public var productChanges: [ProductChange] = []
    public var unchangedProducts: [String] = []
    /// Products on the target that the release does not list: deleted only with `prune`.
    public var extraProducts: [String] = []
    /// Assets on the target that the release does not list (assets are never deleted: a
    /// redemption may still point at them).
    public var extraAssets: [String] = []
    public var prune = false

    public var isEmpty: Bool { uploads.isEmpty && productChanges.isEmpty && (!prune || extraProducts.isEmpty) }

    /// The plan as a diff: `+` new, `~` changed, `-` deleted, `=` unchanged (counted), and a
    /// line for what stays because `--prune` was not given.
    public func diff() -> [String] {
        var lines: [String] = []
        for u in uploads {
            let digest = Hex.encode(u.sha256)
            if let current = u.current {
                var what: [String] = []
                if current.sha256 != digest { what.append("sha256 \(current.sha256.prefix(12))… → \(digest.prefix(12))…") }
                if current.name != u.name { what.append("name: \(current.name) → \(u.name)") }
                if let type = u.entry.contentType, current.contentType != type { what.append("contentType: \(current.contentType) → \(type)") }
                lines.append("~ asset \(u.entry.assetId)  \(what.joined(separator: "; "))  (\(Self.bytes(u.size)), version \(current.version + 1))")
            } else {
                lines.append("+ asset \(u.entry.assetId)  \(u.name)  \(Self.bytes(u.size))  sha256 \(digest.prefix(12))…")
            }
        }
        for change in productChanges {
            switch change {
            case .add(let p):
                lines.append(
                    "+ product \(p.productId)  \(p.type.rawValue)  \(ProductSpec.quoted(p.title))  assets: \(p.assetIds.joined(separator: ", "))")
            case .change(let p, let changes): lines.append("~ product \(p.productId)  \(changes.joined(separator: "; "))")
            }
        }
        for id in extraProducts {
            lines.append(prune ? "- product \(id)" : "  product \(id) is not in the release (kept; --prune deletes it)")
        }
        for id in extraAssets { lines.append("  asset \(id) is not in the release (kept: assets are never deleted)") }
        let deletions = prune ? extraProducts.count : 0
        lines.append(
            "plan: \(uploads.count) upload\(uploads.count == 1 ? "" : "s"), \(productChanges.count) product change\(productChanges.count == 1 ? "" : "s"), "
                + "\(deletions) deletion\(deletions == 1 ? "" : "s"); unchanged: \(unchangedAssets.count) asset\(unchangedAssets.count == 1 ? "" : "s"), "
                + "\(unchangedProducts.count) product\(unchangedProducts.count == 1 ? "" : "s")")
        return lines.map(Terminal.safe)
    }

    static func bytes(_ n: Int64) -> String { Progress.bytes(Double(n)) }
}

/// Publishes a release: plans by SHA-256 (only changed files are uploaded), then uploads,
/// then puts products (their assets exist by then), then — only with `prune` — deletes
/// products the release no longer lists.
public enum ContentSync {
    public static func plan(_ manifest: ReleaseManifest, directory: String, target: any CatalogueTarget, prune: Bool) async throws -> SyncPlan {
        var plan = SyncPlan()
        plan.prune = prune
        let current = Dictionary(try await target.assets().map { ($0.assetId, $0) }, uniquingKeysWith: { a, b in a.version >= b.version ? a : b })
        let root = try realDirectory(directory)
        for entry in manifest.assets {
            let file = try regularFile(entry.file, inside: root)
            let (digest, size) = try sha256(file: file)
            let name = entry.name ?? (entry.file as NSString).lastPathComponent
            let existing = current[entry.assetId]
            if let existing, existing.sha256 == Hex.encode(digest), existing.name == name,
                entry.contentType == nil || entry.contentType == existing.contentType
            {
                plan.unchangedAssets.append(entry.assetId)
            } else {
                plan.uploads.append(.init(entry: entry, file: file, name: name, sha256: digest, size: size, current: existing))
            }
        }
        let listed = Set(manifest.assets.map(\.assetId))
        plan.extraAssets = current.keys.filter { !listed.contains($0) }.sorted()
        let products = Dictionary(try await target.products().map { ($0.productId, ProductSpec($0)) }, uniquingKeysWith: { a, _ in a })
        for p in manifest.products {
            // A product id is the App Store's: one that belongs to another app is a mistake, never a move.
            if let old = products[p.productId], old.bundleId != manifest.bundleId {
                throw ClientError.usage(
                    "product \(p.productId) belongs to \(old.bundleId) on the server, not to this release's \(manifest.bundleId): nothing was changed"
                )
            }
            let spec = ProductSpec(
                productId: p.productId, bundleId: manifest.bundleId, type: p.type, title: p.title, assetIds: p.assetIds,
                familyShareable: p.familyShareable ?? false, durationSeconds: p.durationSeconds)
            if let old = products[p.productId] {
                let changes = spec.changes(from: old)
                if changes.isEmpty { plan.unchangedProducts.append(p.productId) } else { plan.productChanges.append(.change(spec, changes: changes)) }
            } else {
                plan.productChanges.append(.add(spec))
            }
        }
        let wanted = Set(manifest.products.map(\.productId))
        // Only this app's products: a server that sells several apps keeps the others' products.
        plan.extraProducts = products.values.filter { !wanted.contains($0.productId) && $0.bundleId == manifest.bundleId }.map(\.productId).sorted()
        return plan
    }

    /// Carries out `plan`; `report` gets one line per step done.
    public static func apply(_ plan: SyncPlan, target: any CatalogueTarget, report: (String) -> Void = { _ in }) async throws {
        for u in plan.uploads {
            try await target.upload(u.entry, file: u.file, name: u.name, sha256: u.sha256, size: u.size)
            report("uploaded \(u.entry.assetId) (\(SyncPlan.bytes(u.size)))")
        }
        for change in plan.productChanges {
            switch change {
            case .add(let spec), .change(let spec, _):
                try await target.put(spec)
                report("product \(spec.productId) saved")
            }
        }
        if plan.prune {
            for id in plan.extraProducts {
                try await target.deleteProduct(id)
                report("product \(id) deleted")
            }
        }
    }

    /// `directory` with every link resolved.
    static func realDirectory(_ directory: String) throws -> String {
        guard let resolved = realpath(directory, nil) else { throw ClientError.usage("cannot read the directory \(directory)") }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// The release file `relative` as a real path that stays inside `root` (no link leads out)
    /// and names a regular file (not a device or a pipe, which would never end).
    static func regularFile(_ relative: String, inside root: String) throws -> String {
        let joined = (root as NSString).appendingPathComponent(relative)
        guard let resolved = realpath(joined, nil) else { throw ClientError.usage("cannot read \(joined)") }
        defer { free(resolved) }
        let path = String(cString: resolved)
        guard path.hasPrefix(root.hasSuffix("/") ? root : root + "/") else {
            throw ClientError.usage("\(Terminal.safe(relative)) leads outside the release directory (a symbolic link?): refused")
        }
        try requireRegularFile(path)
        return path
    }

    /// Refuses anything but a regular file (a FIFO or a device would hang the hash or the upload).
    public static func requireRegularFile(_ path: String) throws {
        var info = stat()
        guard stat(path, &info) == 0 else { throw ClientError.usage("cannot read \(path)") }
        guard info.st_mode & S_IFMT == S_IFREG else { throw ClientError.usage("\(Terminal.safe(path)) is not a regular file") }
    }

    /// The SHA-256 and size of a file, read in 1 MiB chunks.
    public static func sha256(file: String) throws -> (digest: [UInt8], size: Int64) {
        guard let handle = FileHandle(forReadingAtPath: file) else { throw ClientError.usage("cannot read \(file)") }
        defer { try? handle.close() }
        var hasher = SHA256()
        var size: Int64 = 0
        while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty {
            hasher.update(data: chunk)
            size += Int64(chunk.count)
        }
        return (Array(hasher.finalize()), size)
    }
}

/// The admin API as a sync target.
public struct APICatalogueTarget: CatalogueTarget {
    let client: CofferAPIClient
    let progress: @Sendable (String, Int64) -> (@Sendable (Int64) -> Void)

    /// `progress(assetId, size)` returns the callback that follows one upload.
    public init(client: CofferAPIClient, progress: @escaping @Sendable (String, Int64) -> (@Sendable (Int64) -> Void)) {
        self.client = client
        self.progress = progress
    }

    public func assets() async throws -> [Asset] { try await client.get([Asset].self, "/v1/admin/assets") }
    public func products() async throws -> [Product] { try await client.get([Product].self, "/v1/admin/products") }
    public func upload(_ asset: ReleaseManifest.AssetEntry, file: String, name: String, sha256: [UInt8], size: Int64) async throws {
        _ = try await client.upload(
            file: file, assetId: asset.assetId, name: name, contentType: asset.contentType, sha256: sha256, size: size,
            progress: progress(asset.assetId, size))
    }
    public func put(_ product: ProductSpec) async throws {
        struct Body: Encodable {
            var bundleId: String
            var type: ProductType
            var assetIds: [String]
            var title: String
            var familyShareable: Bool
            var durationSeconds: Int64?
        }
        _ = try await client.call(
            .PUT, "/v1/admin/products/" + (try Identifier.segment(product.productId, "product")),
            json: Body(
                bundleId: product.bundleId, type: product.type, assetIds: product.assetIds, title: product.title,
                familyShareable: product.familyShareable, durationSeconds: product.durationSeconds))
    }
    public func deleteProduct(_ productId: String) async throws {
        _ = try await client.call(.DELETE, "/v1/admin/products/" + (try Identifier.segment(productId, "product")))
    }
}
