import Crypto
import Foundation

/// The admin log's account of the catalogue: the detail each catalogue change is logged with,
/// and the check that every product and asset version in the database is the one the chained
/// admin log says an admin made.
///
/// Every legitimate catalogue change writes its entry in its own transaction
/// (``CatalogueRepository``), so a row the log does not back was written behind the server's
/// back — the worst case an asset version pointing at another asset's bytes, giving a cheap
/// product's buyers premium content — or before Coffer logged every change (the demo's seed
/// catalogue of older versions, rows from before the admin log): `coffer ledger adopt` vouches
/// for those.
public enum CatalogueLog {
    /// The stored detail's budget (``AdminAction/escapedForLedger(_:)``).
    static let maxDetailBytes = 1024

    /// The detail of a `product.put` entry: everything that decides what a purchase unlocks
    /// (the bundle, the type, family sharing, a non-renewing length, the assets in order), not
    /// the title. A list too long for the entry is logged by its count and SHA-256, so it is
    /// still checked whole.
    public static func productDetail(_ p: Product) -> String {
        let head =
            "bundle \(p.bundleId), \(p.type.rawValue)\(p.familyShareable ? ", family-shareable" : "")\(p.durationSeconds.map { ", \($0) s" } ?? "")"
        let listed = head + ", assets " + p.assetIds.joined(separator: " ")
        // Listed only when the list reads back one way: no id empty or holding a space.
        // (Stored as is: within the budget, nothing to escape.)
        if LedgerText.escaped(listed, maxBytes: maxDetailBytes) == listed && p.assetIds.allSatisfy({ !$0.isEmpty && !$0.contains(" ") }) {
            return listed
        }
        // Each id prefixed by its length in bytes: no two lists hash the same bytes.
        let bytes = p.assetIds.flatMap { Array("\($0.utf8.count):".utf8) + Array($0.utf8) }
        return head + ", \(p.assetIds.count) assets, sha256 of their length-prefixed ids \(Hex.encode(Array(SHA256.hash(data: bytes))))"
    }

    /// The detail of an `asset.upload` entry: the version stored and its bytes.
    public static func uploadDetail(_ a: Asset) -> String {
        "version \(a.version), \(a.size) bytes, sha256 \(a.sha256)"
    }

    /// The detail's prefix naming `version` (a logged version whose row now differs).
    static func versionPrefix(_ version: Int) -> String { "version \(version), " }

    /// What `coffer ledger adopt` logs to vouch for the catalogue as it stands: a `product.put`
    /// for each product the log does not back (or backs with other values), a `product.delete`
    /// for each the log has and the database does not, an `asset.upload` for each version the
    /// log does not back, after an `asset.forget` of each logged upload of that version that
    /// differs, and an `asset.forget` for each logged version whose row is gone. An unreadable
    /// product row is not vouched for: its row must be mended or deleted. `actor` gives the
    /// entries' time, key and address.
    public static func adoption(of findings: [CatalogueFinding], by actor: AdminAction) -> [AdminAction] {
        findings.flatMap { finding -> [AdminAction] in
            func action(_ name: AdminActionName, _ detail: String) -> AdminAction {
                var a = actor
                a.action = name.rawValue
                a.target = finding.id
                a.detail = detail
                return a
            }
            switch finding.kind {
            case .productUnlogged, .productChanged: return finding.stored.map { [action(.productPut, $0)] } ?? []
            case .productRemoved: return [action(.productDelete, "")]
            case .productUnreadable: return []
            case .assetVersionUnlogged, .assetVersionChanged, .assetVersionRemoved:
                return finding.logged.map { action(.assetForget, $0) } + (finding.stored.map { [action(.assetUpload, $0)] } ?? [])
            }
        }
    }
}

extension CatalogueLog {
    /// The part of a `ledger.adopt` entry's detail that counts what was vouched for, by kind
    /// ("" when nothing was), and the unreadable rows left.
    public static func adoptionSummary(_ findings: [CatalogueFinding]) -> String {
        let vouched = Dictionary(grouping: findings.filter { $0.kind != .productUnreadable }, by: \.kind)
            .sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.value.count) \($0.key.rawValue)" }
        let unreadable = findings.filter { $0.kind == .productUnreadable }.count
        return (vouched.isEmpty ? "" : "vouched for the catalogue: " + vouched.joined(separator: ", "))
            + (unreadable == 0 ? "" : "\(vouched.isEmpty ? "" : "; ")\(unreadable) unreadable product rows left")
    }
}

/// A product or asset version the chained admin log does not back.
public struct CatalogueFinding: Sendable, Hashable, CustomStringConvertible {
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        /// A product in the database that no `product.put` made.
        case productUnlogged
        /// A product that differs from its last logged `product.put`.
        case productChanged
        /// A product the log last put that the database does not hold (deleted unlogged).
        case productRemoved
        /// A product row that cannot be read (an unknown type, asset ids that are not a list).
        case productUnreadable
        /// An asset version in the database that no `asset.upload` made.
        case assetVersionUnlogged
        /// An asset version whose size or SHA-256 differs from its logged upload.
        case assetVersionChanged
        /// A logged asset version that the database does not hold.
        case assetVersionRemoved
    }

    public var kind: Kind
    /// The product id, or the asset id, escaped as the log stores it: a row's id is not
    /// verified input, and reaches an auditor's terminal.
    public var id: String
    /// The asset version, for the asset kinds.
    public var version: Int?
    /// What the row says, in the log's terms (nil for a removed or unreadable row).
    public var stored: String?
    /// What the log says of it: the last put of a product, a version's upload (empty when unlogged).
    public var logged: [String]
    /// The admin-log entry that logged it last (nil when unlogged).
    public var sequence: Int64?

    public init(kind: Kind, id: String, version: Int? = nil, stored: String?, logged: [String], sequence: Int64?) {
        self.kind = kind
        self.id = id
        self.version = version
        self.stored = stored
        self.logged = logged
        self.sequence = sequence
    }

    public var description: String {
        let what = version.map { "asset \(id) version \($0)" } ?? "product \(id)"
        switch kind {
        case .productUnlogged, .assetVersionUnlogged: return "\(what) (\(stored ?? "?")) is not in the admin log"
        case .productChanged, .assetVersionChanged:
            return "\(what) is \(stored ?? "?"), but the admin log (entry \(sequence ?? 0)) says \(logged.joined(separator: "; "))"
        case .productRemoved, .assetVersionRemoved:
            return "\(what) is in the admin log (entry \(sequence ?? 0): \(logged.joined(separator: "; "))) but not in the database"
        case .productUnreadable: return "\(what) cannot be read: \(logged.isEmpty ? "not in the admin log" : "logged as \(logged.joined())")"
        }
    }
}

/// Replays the catalogue entries of a chained admin log, then checks the catalogue's rows
/// against them. Fed by ``LedgerAudit`` entry by entry (only entries whose hash it checks);
/// memory proportional to the catalogue's logged changes.
public struct CatalogueAudit: Sendable {
    /// Product id → the detail of its last logged put (nil after a logged delete) and that entry.
    private var products: [ExactText: (detail: String?, sequence: Int64)] = [:]
    /// Asset id → each logged version's detail → its entry (removed by `asset.forget`).
    private var versions: [ExactText: [ExactText: Int64]] = [:]
    private var seenProducts: Set<ExactText> = []
    private var seenVersions: [ExactText: Set<ExactText>] = [:]
    private var findings: [CatalogueFinding] = []

    public init() {}

    /// An entry of the chain; only catalogue admin actions count.
    public mutating func add(_ entry: LedgerEntry) {
        guard entry.kind == .adminAction, entry.values.count > 5, let action = entry.values[3], let target = entry.values[4] else { return }
        let detail = ExactText(entry.values[5] ?? "")
        switch AdminActionName(rawValue: action) {
        case .productPut: products[ExactText(target)] = (detail.text, entry.sequence)
        case .productDelete: products[ExactText(target)] = (nil, entry.sequence)
        case .assetUpload: versions[ExactText(target), default: [:]][detail] = entry.sequence
        case .assetForget: versions[ExactText(target)]?[detail] = nil
        default: break
        }
    }

    /// Why `product` is not what the log last put under its id (nil when it is): the server's
    /// check before it serves a row (``CatalogueBacking``).
    func refusal(_ product: Product) -> CatalogueFinding? {
        let key = Self.key(product.productId)
        let stored = Self.detail(product)
        guard let entry = products[key], let logged = entry.detail else {
            return CatalogueFinding(kind: .productUnlogged, id: key.text, stored: stored, logged: [], sequence: nil)
        }
        if ExactText(logged) == ExactText(stored) { return nil }
        return CatalogueFinding(kind: .productChanged, id: key.text, stored: stored, logged: [logged], sequence: entry.sequence)
    }

    /// Why `asset` is not, as it is, the latest version of its asset the log holds an upload
    /// of (nil when it is): the one the server serves — a newer logged version whose row is
    /// gone must not bring an older one back.
    func refusal(_ asset: Asset) -> CatalogueFinding? {
        let key = Self.key(asset.assetId)
        let stored = ExactText(Self.detail(asset))
        let logged = versions[key] ?? [:]
        guard logged[stored] != nil else { return Self.mismatch(asset, key: key, stored: stored, logged: logged).finding }
        let newer = logged.filter { (Self.version(in: $0.key.text) ?? 0) > asset.version }
        guard let latest = newer.max(by: { (Self.version(in: $0.key.text) ?? 0) < (Self.version(in: $1.key.text) ?? 0) }) else { return nil }
        return CatalogueFinding(
            kind: .assetVersionRemoved, id: key.text, version: Self.version(in: latest.key.text), stored: nil, logged: [latest.key.text],
            sequence: latest.value)
    }

    /// An id as the log stores it.
    private static func key(_ id: String) -> ExactText { ExactText(LedgerText.escaped(id, maxBytes: 512)) }
    /// A row's detail as the log stores it.
    private static func detail(_ product: Product) -> String {
        LedgerText.escaped(CatalogueLog.productDetail(product), maxBytes: CatalogueLog.maxDetailBytes)
    }
    private static func detail(_ asset: Asset) -> String {
        LedgerText.escaped(CatalogueLog.uploadDetail(asset), maxBytes: CatalogueLog.maxDetailBytes)
    }

    /// A product row as read; nil when it cannot be read.
    public mutating func product(id: String, _ product: Product?) {
        let key = Self.key(id)
        seenProducts.insert(key)
        let logged = products[key].flatMap { entry in entry.detail.map { (detail: $0, sequence: entry.sequence) } }
        guard let product else {
            findings.append(
                CatalogueFinding(
                    kind: .productUnreadable, id: key.text, stored: nil, logged: logged.map { [$0.detail] } ?? [], sequence: logged?.sequence))
            return
        }
        if let finding = refusal(product) { findings.append(finding) }
    }

    /// An asset version row as read.
    public mutating func version(_ asset: Asset) {
        let key = Self.key(asset.assetId)
        let stored = ExactText(Self.detail(asset))
        let logged = versions[key] ?? [:]
        if logged[stored] != nil {
            seenVersions[key, default: []].insert(stored)
            return
        }
        let mismatch = Self.mismatch(asset, key: key, stored: stored, logged: logged)
        // A logged upload of this version that differs is reported here, not again as removed.
        seenVersions[key, default: []].formUnion(mismatch.same)
        findings.append(mismatch.finding)
    }

    /// An asset version row no logged upload made as it is: changed from its version's upload
    /// (`same`: the logged uploads of that version), or unlogged.
    private static func mismatch(_ asset: Asset, key: ExactText, stored: ExactText, logged: [ExactText: Int64]) -> (
        finding: CatalogueFinding, same: [ExactText]
    ) {
        let prefix = CatalogueLog.versionPrefix(asset.version).utf8
        let same = logged.filter { $0.key.text.utf8.starts(with: prefix) }.sorted { $0.value < $1.value }
        return (
            CatalogueFinding(
                kind: same.isEmpty ? .assetVersionUnlogged : .assetVersionChanged, id: key.text, version: asset.version, stored: stored.text,
                logged: same.map(\.key.text), sequence: same.last?.value),
            same.map(\.key)
        )
    }

    /// Every finding, rows first (in the order read), then what the log holds and the
    /// database does not (by id).
    public func finish() -> [CatalogueFinding] {
        var all = findings
        for (id, entry) in products.sorted(by: { $0.key < $1.key }) where !seenProducts.contains(id) {
            guard let detail = entry.detail else { continue }
            all.append(CatalogueFinding(kind: .productRemoved, id: id.text, stored: nil, logged: [detail], sequence: entry.sequence))
        }
        for (id, logged) in versions.sorted(by: { $0.key < $1.key }) {
            let seen = seenVersions[id] ?? []
            for (detail, sequence) in logged.sorted(by: { $0.value < $1.value }) where !seen.contains(detail) {
                all.append(
                    CatalogueFinding(
                        kind: .assetVersionRemoved, id: id.text, version: Self.version(in: detail.text), stored: nil, logged: [detail.text],
                        sequence: sequence))
            }
        }
        return all
    }

    /// The version a logged upload's detail names.
    static func version(in detail: String) -> Int? {
        guard detail.hasPrefix("version ") else { return nil }
        return Int(detail.dropFirst("version ".count).prefix { $0.isNumber })
    }
}

/// Text compared and hashed byte for byte, as the databases compare it: Swift's `String`
/// equality is canonical equivalence (U+212A KELVIN SIGN equals "K"), under which a row naming
/// other bytes could pass for the logged ones.
struct ExactText: Hashable, Comparable, Sendable {
    let text: String

    init(_ text: String) { self.text = text }

    static func == (a: ExactText, b: ExactText) -> Bool { a.text.utf8.elementsEqual(b.text.utf8) }
    static func < (a: ExactText, b: ExactText) -> Bool { a.text.utf8.lexicographicallyPrecedes(b.text.utf8) }
    func hash(into hasher: inout Hasher) {
        hasher.combine(text.utf8.count)
        for byte in text.utf8 { hasher.combine(byte) }
    }
}
