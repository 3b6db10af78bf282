import CofferCore
import CofferTestSupport
import Foundation
import Synchronization
import Testing

/// The server's check of each catalogue row it reads against the chained admin log: served
/// only as an admin last made it; entries logged since are read on a miss, and only those; an
/// entry edited behind the chain's back backs nothing.
@Suite("Catalogue backing")
struct CatalogueBackingTests {
    /// A chained admin log: entries hashed as the stores chain them, read as the stores read
    /// them (catalogue actions after a row, in row order), every query recorded.
    final class Log: CatalogueLogSource, Sendable {
        private struct State {
            var chain: [LinkedEntry] = []
            var head = Hex.encode(LedgerChain.genesis)
            var queries: [Int64] = []
            var failing = false
        }
        private let state = Mutex(State())

        /// Appends `action` (a key entry between entries, as in a real chain, when `gap`).
        func append(_ action: AdminActionName, _ target: String, _ detail: String, gap: Bool = false) {
            state.withLock { s in
                for name in (gap ? [AdminActionName.keyCreate] : []) + [action] {
                    let sequence = Int64(s.chain.count + 1)
                    let row = AdminAction(
                        sequence: sequence, at: instant(Double(sequence)), keyId: "k", keyName: "Ops", action: name.rawValue, target: target,
                        detail: detail, clientAddress: "local")
                    let entry = LedgerEntry.adminAction(row, sequence: sequence)
                    let hash = Hex.encode(LedgerChain.hash(previous: Hex.decode(s.head) ?? [], entry: entry))
                    s.chain.append(LinkedEntry(previousHash: s.head, chained: ChainedEntry(entry: entry, entryHash: hash)))
                    s.head = hash
                }
            }
        }

        /// Edits the detail of entry `sequence` behind the chain's back (its hash kept).
        func edit(_ sequence: Int64, detail: String) {
            state.withLock { s in s.chain[Int(sequence - 1)].chained.entry.values[5] = detail }
        }

        func fail(_ failing: Bool) { state.withLock { $0.failing = failing } }
        var queries: [Int64] { state.withLock { $0.queries } }

        func catalogueLog(afterRow: Int64, limit: Int) async throws -> [LinkedEntry] {
            try state.withLock { s in
                s.queries.append(afterRow)
                if s.failing { throw CancellationError() }
                let names = Set(CatalogueLog.actions.map(\.rawValue))
                return Array(s.chain.filter { $0.chained.entry.row > afterRow && names.contains($0.chained.entry.values[3] ?? "") }.prefix(limit))
            }
        }
    }

    final class Reports: Sendable {
        private let lines = Mutex<[String]>([])
        func add(_ line: String) { lines.withLock { $0.append(line) } }
        var all: [String] { lines.withLock { $0 } }
    }

    static func product(_ id: String, _ assets: [String], family: Bool = false) -> Product {
        Product(
            productId: id, bundleId: "com.example.app", type: .nonConsumable, assetIds: assets, title: id, updatedAt: instant(0),
            familyShareable: family)
    }

    static func asset(_ id: String, version: Int = 1, bytes: String) -> Asset {
        Asset(
            assetId: id, version: version, name: id, contentType: "application/json", size: Int64(bytes.utf8.count), sha256: fakeHash(bytes),
            createdAt: instant(0))
    }

    /// The cheap level and the premium level uploaded, the cheap pack put.
    static func logged() -> Log {
        let log = Log()
        log.append(.assetUpload, "level-1", CatalogueLog.uploadDetail(asset("level-1", bytes: "cheap")))
        log.append(.assetUpload, "premium", CatalogueLog.uploadDetail(asset("premium", bytes: "premium")), gap: true)
        log.append(.productPut, "cheap", CatalogueLog.productDetail(product("cheap", ["level-1"])))
        return log
    }

    @Test("a row is served only as the log last made it; each refused row is reported once")
    func refusedUnlessLogged() async throws {
        let log = Self.logged()
        let reports = Reports()
        let backing = CatalogueBacking(log, report: reports.add)
        let cheap = Self.product("cheap", ["level-1"])
        #expect(try await backing.product { cheap } == cheap)
        #expect(try await backing.asset { Self.asset("level-1", bytes: "cheap") } != nil)
        #expect(try await backing.product { nil } == nil, "a row the store does not hold is not a refusal")

        // The insider's rows: the cheap pack given the premium level, the cheap level's row
        // pointed at the premium bytes, a product no admin put, a version no admin uploaded.
        let tampered: [(kind: CatalogueFinding.Kind, read: () async throws -> Void)] = [
            (.productChanged, { _ = try await backing.product { Self.product("cheap", ["level-1", "premium"]) } }),
            (.productChanged, { _ = try await backing.product { Self.product("cheap", ["level-1"], family: true) } }),
            (.assetVersionChanged, { _ = try await backing.asset { Self.asset("level-1", bytes: "premium") } }),
            (.productUnlogged, { _ = try await backing.product { Self.product("forged", ["premium"]) } }),
            (.assetVersionUnlogged, { _ = try await backing.asset { Self.asset("premium", version: 2, bytes: "premium") } }),
        ]
        for (kind, read) in tampered {
            for _ in 0..<3 {
                let error = await #expect(throws: CatalogueBacking.Unbacked.self) { try await read() }
                #expect(error?.finding.kind == kind, "\(String(describing: error))")
            }
        }
        #expect(reports.all.count == tampered.count, "once per row, not per read: \(reports.all)")
        #expect(
            reports.all.contains(
                "catalogue row refused: product cheap is bundle com.example.app, nonConsumable, assets level-1 premium, but the admin log (entry 4) says bundle com.example.app, nonConsumable, assets level-1 (check with `coffer ledger verify`)"
            ), "\(reports.all)")
    }

    @Test("after each row read, the entries logged since are read, and only those")
    func followsOnlyNewEntries() async throws {
        let log = Self.logged()
        let backing = CatalogueBacking(log, page: 2)
        let cheap = Self.product("cheap", ["level-1"])
        #expect(try await backing.product { cheap } == cheap)
        #expect(log.queries == [0, 3], "the first read reads the whole log, a page of 2 at a time")
        _ = try await backing.product { cheap }
        #expect(log.queries == [0, 3, 4], "then what follows the last row it had")

        // An admin (here or on another instance) changes the pack: stored with its entry.
        let changed = Self.product("cheap", ["level-1", "premium"])
        log.append(.productPut, "cheap", CatalogueLog.productDetail(changed))
        #expect(try await backing.product { changed } == changed)
        #expect(log.queries == [0, 3, 4, 4])
        await #expect(throws: CatalogueBacking.Unbacked.self, "the old detail is no longer the product") { _ = try await backing.product { cheap } }

        // Deleted by an admin: the row put back behind the log's back is refused, though
        // an admin once made it.
        log.append(.productDelete, "cheap", "")
        await #expect(throws: CatalogueBacking.Unbacked.self) { _ = try await backing.product { changed } }
        // A version forgotten by `adopt` no longer backs its row.
        log.append(.assetForget, "level-1", CatalogueLog.uploadDetail(Self.asset("level-1", bytes: "cheap")))
        await #expect(throws: CatalogueBacking.Unbacked.self) { _ = try await backing.asset { Self.asset("level-1", bytes: "cheap") } }
    }

    @Test("a row changed again while it was checked is read once more")
    func aRowReadStaleIsReadAgain() async throws {
        let log = Self.logged()
        let backing = CatalogueBacking(log)
        let cheap = Self.product("cheap", ["level-1"])
        #expect(try await backing.product { cheap } == cheap)
        // Two admin changes land between the row's read and the log's.
        let first = Self.product("cheap", ["premium"])
        let second = Self.product("cheap", ["level-1", "premium"])
        log.append(.productPut, "cheap", CatalogueLog.productDetail(first))
        log.append(.productPut, "cheap", CatalogueLog.productDetail(second))
        let reads = Mutex(0)
        let served = try await backing.product {
            reads.withLock { $0 += 1 }
            return reads.withLock { $0 } == 1 ? first : second
        }
        #expect(served == second && reads.withLock { $0 } == 2)
    }

    @Test("an entry edited behind the chain's back backs nothing, and is reported")
    func anEditedEntryBacksNothing() async throws {
        let log = Self.logged()
        // The insider points the pack's logged detail at the premium level too, keeping its hash.
        let tampered = Self.product("cheap", ["level-1", "premium"])
        log.edit(4, detail: CatalogueLog.productDetail(tampered))
        let reports = Reports()
        let backing = CatalogueBacking(log, report: reports.add)
        let error = await #expect(throws: CatalogueBacking.Unbacked.self) { _ = try await backing.product { tampered } }
        #expect(error?.finding.kind == .productUnlogged, "the edited entry is not the pack's put")
        await #expect(throws: CatalogueBacking.Unbacked.self, "nor is the original") {
            _ = try await backing.product { Self.product("cheap", ["level-1"]) }
        }
        #expect(
            reports.all.contains(
                "admin log entry 4 does not match its stored hash: it backs no catalogue row (check with `coffer ledger verify`)"),
            "\(reports.all)")
        // Entries around it still back their rows.
        #expect(try await backing.asset { Self.asset("premium", bytes: "premium") } != nil)
    }

    @Test("the start-up check lists every unbacked row; a failed read of the log is retried by the next read")
    func startupAndFailure() async throws {
        let log = Self.logged()
        let backing = CatalogueBacking(log)
        log.fail(true)
        await #expect(throws: CancellationError.self) { _ = try await backing.product { Self.product("cheap", ["level-1"]) } }
        log.fail(false)
        let findings = try await backing.unbacked(
            products: [Self.product("cheap", ["level-1"]), Self.product("forged", ["premium"])],
            assets: [Self.asset("level-1", bytes: "premium"), Self.asset("premium", bytes: "premium")])
        #expect(findings.map { "\($0.kind.rawValue) \($0.id)" } == ["productUnlogged forged", "assetVersionChanged level-1"], "\(findings)")
        #expect(try await backing.unbacked(products: [Self.product("cheap", ["level-1"])], assets: []).isEmpty)
    }
}
