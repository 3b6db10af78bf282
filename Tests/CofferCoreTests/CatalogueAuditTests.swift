import CofferCore
import CofferTestSupport
import Foundation
import Testing

/// The admin log's account of the catalogue, replayed and checked against rows, without a
/// database: what each logged detail binds, and what `coffer ledger adopt` logs to vouch.
@Suite struct CatalogueAuditTests {
    static func entry(_ sequence: Int64, _ action: AdminActionName, _ target: String, _ detail: String) -> LedgerEntry {
        .adminAction(
            AdminAction.escapedForLedger(
                AdminAction(
                    sequence: sequence, at: instant(0), keyId: "k", keyName: "Ops", action: action, target: target, detail: detail,
                    clientAddress: "local")),
            sequence: sequence)
    }

    static func product(_ id: String, _ assets: [String], duration: Int64? = nil) -> Product {
        Product(
            productId: id, bundleId: "com.example.app", type: duration == nil ? .nonConsumable : .nonRenewing, assetIds: assets, title: "T",
            updatedAt: instant(1), durationSeconds: duration)
    }

    static func asset(_ id: String, _ version: Int, _ bytes: String) -> Asset {
        Asset(
            assetId: id, version: version, name: id, contentType: "x", size: Int64(bytes.utf8.count), sha256: fakeHash(bytes), createdAt: instant(2))
    }

    /// The findings of `rows` against the log `entries`, as "kind id[ vN]".
    static func findings(_ entries: [LedgerEntry], products: [Product], assets: [Asset]) -> [String] {
        var audit = CatalogueAudit()
        for entry in entries { audit.add(entry) }
        for p in products { audit.product(id: p.productId, p) }
        for a in assets { audit.version(a) }
        return audit.finish().map { "\($0.kind.rawValue) \($0.id)\($0.version.map { " v\($0)" } ?? "")" }
    }

    @Test func theLastLoggedPutBacksAProductAndEveryUploadItsVersion() {
        let v1 = Self.asset("a", 1, "one")
        let v2 = Self.asset("a", 2, "two")
        let pass = Self.product("pass", ["a"], duration: 86_400)
        let log = [
            Self.entry(1, .assetUpload, "a", CatalogueLog.uploadDetail(v1)), Self.entry(2, .assetUpload, "a", CatalogueLog.uploadDetail(v2)),
            Self.entry(3, .productPut, "pass", CatalogueLog.productDetail(Self.product("pass", ["b"]))),
            Self.entry(4, .productPut, "pass", CatalogueLog.productDetail(pass)),
            Self.entry(5, .productPut, "gone", CatalogueLog.productDetail(Self.product("gone", ["a"]))), Self.entry(6, .productDelete, "gone", ""),
            Self.entry(7, .keyCreate, "pass", "not a catalogue entry"),
        ]
        #expect(CatalogueLog.productDetail(pass) == "bundle com.example.app, nonRenewing, 86400 s, assets a")
        #expect(CatalogueLog.uploadDetail(v1) == "version 1, 3 bytes, sha256 \(fakeHash("one"))")
        #expect(Self.findings(log, products: [pass], assets: [v1, v2]).isEmpty)
        // Back to the earlier put; a deleted product back; a version's bytes swapped; one gone.
        #expect(
            Self.findings(
                log, products: [Self.product("pass", ["b"]), Self.product("gone", ["a"])], assets: [Self.asset("a", 1, "two")])
                == ["productChanged pass", "productUnlogged gone", "assetVersionChanged a v1", "assetVersionRemoved a v2"])
        // A product the log put and the database lost; nothing logged at all.
        #expect(Self.findings(log, products: [], assets: [v1, v2]) == ["productRemoved pass"])
        #expect(Self.findings([], products: [pass], assets: [v1]) == ["productUnlogged pass", "assetVersionUnlogged a v1"])
    }

    /// Ids and details compare by bytes, as the databases do: a row naming "\u{212A}ey" (KELVIN
    /// SIGN) is not the logged "Key", though Swift's strings call them equal.
    @Test func lookAlikeTextIsNotTheLoggedText() {
        let logged = Self.product("pack", ["Key"])
        let lookAlike = Self.product("pack", ["\u{212A}ey"])
        #expect(CatalogueLog.productDetail(logged) == CatalogueLog.productDetail(lookAlike), "equal as Swift strings")
        let log = [Self.entry(1, .productPut, "pack", CatalogueLog.productDetail(logged))]
        #expect(Self.findings(log, products: [logged], assets: []).isEmpty)
        #expect(Self.findings(log, products: [lookAlike], assets: []) == ["productChanged pack"])
        #expect(Self.findings(log, products: [Self.product("\u{212A}pack", ["Key"])], assets: []).contains("productUnlogged \u{212A}pack"))
        // A row's id reaches the auditor's terminal escaped, never as a control sequence.
        #expect(Self.findings([], products: [Self.product("\u{1B}[2Jpack", [])], assets: []) == [#"productUnlogged \u{1B}[2Jpack"#])
    }

    /// 1,000 asset ids of 128 bytes do not fit an entry's 1,024 bytes: the list is logged by
    /// count and SHA-256, so a change past the cut is still seen.
    @Test func aLongAssetListIsBoundWhole() {
        let ids = (0..<1000).map { String(format: "%03d", $0) + String(repeating: "x", count: 125) }
        let product = Self.product("big", ids)
        let detail = CatalogueLog.productDetail(product)
        #expect(detail.utf8.count <= 1024)
        #expect(detail.hasPrefix("bundle com.example.app, nonConsumable, 1000 assets, sha256 of their length-prefixed ids "), "\(detail)")
        var changed = ids
        changed[999] = "999" + String(repeating: "y", count: 125)
        #expect(CatalogueLog.productDetail(Self.product("big", changed)) != detail)
        let log = [Self.entry(1, .productPut, "big", detail)]
        #expect(Self.findings(log, products: [product], assets: []).isEmpty)
        #expect(Self.findings(log, products: [Self.product("big", changed)], assets: []) == ["productChanged big"])
        // A short list is logged as it is; one that would not read back one way is hashed.
        #expect(CatalogueLog.productDetail(Self.product("small", ["a", "b"])).hasSuffix(", assets a b"))
        let spaced = CatalogueLog.productDetail(Self.product("small", ["a b"]))
        #expect(spaced.contains("1 assets, sha256 of their length-prefixed ids "), "\(spaced)")
        #expect(CatalogueLog.productDetail(Self.product("small", ["a", "b c"])) != CatalogueLog.productDetail(Self.product("small", ["a b", "c"])))
    }

    /// What adoption logs, replayed after the log it vouches for, backs the rows as they stand
    /// — except an unreadable row, which it does not vouch for.
    @Test func anAdoptionBacksTheCatalogueAsItStands() {
        let log = [
            Self.entry(1, .assetUpload, "a", CatalogueLog.uploadDetail(Self.asset("a", 1, "one"))),
            Self.entry(2, .assetUpload, "a", CatalogueLog.uploadDetail(Self.asset("a", 2, "two"))),
            Self.entry(3, .productPut, "kept", CatalogueLog.productDetail(Self.product("kept", ["a"]))),
            Self.entry(4, .productPut, "lost", CatalogueLog.productDetail(Self.product("lost", ["a"]))),
        ]
        let products = [Self.product("kept", ["a", "b"]), Self.product("new", ["b"])]
        let assets = [Self.asset("a", 1, "swapped"), Self.asset("b", 1, "bee")]
        var audit = CatalogueAudit()
        for entry in log { audit.add(entry) }
        for p in products { audit.product(id: p.productId, p) }
        audit.product(id: "broken", nil)
        for a in assets { audit.version(a) }
        let found = audit.finish()
        #expect(found.count == 7, "\(found)")
        let actor = AdminAction(
            at: instant(9), keyId: "cli", keyName: "local user root", action: .ledgerAdopt, target: "", detail: "", clientAddress: "local")
        let adoption = CatalogueLog.adoption(of: found, by: actor)
        #expect(
            adoption.map { "\($0.action) \($0.target)" } == [
                "product.put kept", "product.put new", "asset.forget a", "asset.upload a", "asset.upload b", "product.delete lost", "asset.forget a",
            ])
        #expect(adoption.allSatisfy { $0.keyName == "local user root" && $0.at == instant(9) })
        let after =
            log
            + adoption.enumerated().map {
                Self.entry(Int64(5 + $0.offset), AdminActionName(rawValue: $0.element.action) ?? .ledgerAdopt, $0.element.target, $0.element.detail)
            }
        var again = CatalogueAudit()
        for entry in after { again.add(entry) }
        for p in products { again.product(id: p.productId, p) }
        again.product(id: "broken", nil)
        for a in assets { again.version(a) }
        #expect(again.finish().map(\.kind) == [.productUnreadable])
    }
}
