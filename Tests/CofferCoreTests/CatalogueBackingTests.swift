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
    static let signer = LedgerSigner(privateKey: .init())

    /// A chain as the stores keep it: entries hashed, the head sealed by the ledger key after
    /// each append, checkpoints when asked; its admin events read in chain order, each query
    /// recorded.
    final class Log: CatalogueLogSource, Sendable {
        private struct State {
            var chain: [ChainedEntry] = []
            var adminRows: [Int64] = []
            var checkpoints: [LedgerCheckpoint] = []
            var seal: LedgerCheckpoint?
            var queries: [Int64] = []
            var failing = false
            /// A database that stopped answering: reads of the admin events wait until it is unset.
            var stalled = false
            var eventReads = 0
        }
        private let state = Mutex(State())

        /// Appends `action` (after an attempt entry, as between real admin changes, when `gap`)
        /// and seals the head.
        func append(_ action: AdminActionName, _ target: String, _ detail: String, gap: Bool = false) {
            state.withLock { s in
                if gap { Self.attempt(&s) }
                let sequence = Int64(s.chain.count + 1)
                let row = AdminAction(
                    sequence: sequence, at: instant(Double(sequence)), keyId: "k", keyName: "Ops", action: action.rawValue, target: target,
                    detail: detail, clientAddress: "local")
                Self.chain(&s, .adminAction(row, sequence: sequence))
            }
        }

        /// Chains a refused attempt (not an admin entry) and seals the head.
        func attempt() { state.withLock { Self.attempt(&$0) } }

        private static func attempt(_ s: inout State) {
            let attempt = RejectedAttempt(
                at: instant(0), code: "alreadyRedeemed", detail: "", transactionId: "1", productId: "cheap", receiptSHA256: fakeHash("r"),
                clientAddress: "192.0.2.1", claimed: false)
            chain(&s, .attempt(attempt, sequence: Int64(s.chain.count + 1)))
        }

        /// The insider hides admin entry `sequence`: its event re-pointed at another kind
        /// (hash kept), or deleted with its row.
        func hide(_ sequence: Int64, deleting: Bool) {
            state.withLock { s in
                let index = Int(sequence - 1)
                if deleting {
                    s.chain.remove(at: index)
                    s.adminRows.removeAll { $0 == sequence }
                } else {
                    s.chain[index].entry.kind = .attempt
                }
            }
        }

        private static func chain(_ s: inout State, _ entry: LedgerEntry, seal: Bool = true) {
            if entry.kind == .adminAction { s.adminRows.append(entry.row) }
            let previous = s.chain.last.flatMap { Hex.decode($0.entryHash) } ?? LedgerChain.genesis
            let hash = Hex.encode(LedgerChain.hash(previous: previous, entry: entry))
            s.chain.append(ChainedEntry(entry: entry, entryHash: hash))
            if seal { s.seal = try? CatalogueBackingTests.signer.checkpoint(sequence: entry.sequence, entryHash: hash, time: 0) }
        }

        /// Signs a checkpoint of the head (by the ledger key, unless another is given).
        func checkpoint(by signer: LedgerSigner = CatalogueBackingTests.signer) {
            state.withLock { s in
                guard let head = s.chain.last, let k = try? signer.checkpoint(sequence: head.entry.sequence, entryHash: head.entryHash, time: 0)
                else { return }
                s.checkpoints.append(k)
            }
        }

        /// The insider's edit of entry `sequence`'s detail, its stored hash kept or recomputed.
        func edit(_ sequence: Int64, detail: String) {
            state.withLock { s in s.chain[Int(sequence - 1)].entry.values[5] = detail }
        }

        /// The insider's appended admin entry: hashed as the chain's next, but they cannot sign the seal.
        func forge(_ action: AdminActionName, _ target: String, _ detail: String) {
            state.withLock { s in
                let sequence = Int64(s.chain.count + 1)
                let row = AdminAction(
                    sequence: sequence, at: instant(0), keyId: "k", keyName: "Ops", action: action.rawValue, target: target, detail: detail,
                    clientAddress: "local")
                Self.chain(&s, .adminAction(row, sequence: sequence), seal: false)
            }
        }

        func fail(_ failing: Bool) { state.withLock { $0.failing = failing } }
        func stall(_ stalled: Bool) { state.withLock { $0.stalled = stalled } }
        var eventReads: Int { state.withLock { $0.eventReads } }
        var queries: [Int64] { state.withLock { $0.queries } }

        func adminEvents(after: Int64, limit: Int) async throws -> [Int64] {
            state.withLock { $0.eventReads += 1 }
            // Not cancellable, as a hung database is not: polls the condition until released.
            while state.withLock({ $0.stalled }) { try? await Task.sleep(for: .milliseconds(5)) }
            return try state.withLock { s in
                s.queries.append(after)
                if s.failing { throw CancellationError() }
                return Array(s.chain.map(\.entry).filter { $0.kind == .adminAction && $0.sequence > after }.map(\.sequence).prefix(limit))
            }
        }

        func adminRows(after: Int64, limit: Int) async throws -> [Int64] {
            state.withLock { s in Array(s.adminRows.filter { $0 > after }.prefix(limit)) }
        }
        func eventCount(after: Int64, through: Int64) async throws -> Int64 {
            state.withLock { s in Int64(s.chain.filter { $0.entry.sequence > after && $0.entry.sequence <= through }.count) }
        }
        func chainedEntries(after: Int64, limit: Int) async throws -> [ChainedEntry] {
            state.withLock { s in Array(s.chain.filter { $0.entry.sequence > after }.prefix(limit)) }
        }
        func checkpoints(after: Int64, limit: Int) async throws -> [LedgerCheckpoint] {
            state.withLock { s in Array(s.checkpoints.filter { $0.sequence > after }.prefix(limit)) }
        }
        func latestCheckpoint() async throws -> LedgerCheckpoint? { state.withLock { $0.checkpoints.last } }
        func sealedHead() async throws -> LedgerCheckpoint? { state.withLock { $0.seal } }
        func checkpointHead(now: Date) async throws -> LedgerCheckpoint? { nil }
        func sealIntact() async throws {}
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
        let backing = CatalogueBacking(log, publicKey: Self.signer.publicKey, report: reports.add)
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
        let backing = CatalogueBacking(log, publicKey: Self.signer.publicKey, page: 2)
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
        let backing = CatalogueBacking(log, publicKey: Self.signer.publicKey)
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

    /// The insider's ways round the log: edit an entry (after a checkpoint signed it, or while
    /// only the seal covers it), append one with a correctly computed hash (with a checkpoint
    /// signed by another key, or none), or hide an admin's later change from a running
    /// instance (its event re-pointed at another kind, or deleted with its row). Each stops
    /// the catalogue: an entry skipped would bring an older catalogue back.
    @Test(
        "an admin-log entry the ledger key did not sign stops the catalogue",
        arguments: [
            "edited", "edited under a checkpoint", "forged", "forged, with a checkpoint of another key", "hidden (its event re-pointed)",
            "hidden (its event and row deleted)",
        ])
    func anUnsignedEntryStopsTheCatalogue(way: String) async throws {
        let log = Self.logged()
        let tampered = Self.product("cheap", ["level-1", "premium"])
        let reports = Reports()
        let backing = CatalogueBacking(log, publicKey: Self.signer.publicKey, report: reports.add)
        if way.hasPrefix("hidden") {
            // A running instance has read the log; an admin then takes the premium level out
            // again, and the insider hides that change from it and puts the row back.
            log.append(.productPut, "cheap", CatalogueLog.productDetail(tampered))
            #expect(try await backing.product { tampered } == tampered)
            log.append(.productPut, "cheap", CatalogueLog.productDetail(Self.product("cheap", ["level-1"])))
            log.attempt()
            log.hide(6, deleting: way.contains("deleted"))
        } else if way.hasPrefix("forged") {
            #expect(try await backing.product { Self.product("cheap", ["level-1"]) } != nil, "a running instance")
            log.forge(.productPut, "cheap", CatalogueLog.productDetail(tampered))
            if way.hasSuffix("another key") { log.checkpoint(by: LedgerSigner(privateKey: .init())) }
        } else {
            if way == "edited under a checkpoint" {
                log.append(.keyCreate, "ops", "admin key", gap: true)
                log.checkpoint()
            }
            log.edit(4, detail: CatalogueLog.productDetail(tampered))
        }
        let broken = await #expect(throws: CatalogueBacking.LogBroken.self) { _ = try await backing.product { tampered } }
        #expect(
            broken?.failure.sequence == (way.hasPrefix("forged") ? 5 : way.hasPrefix("hidden") ? (way.contains("deleted") ? 6 : 5) : 4),
            "\(String(describing: broken))")
        if way.hasSuffix("another key") { #expect(broken?.failure.reason.contains("not signed by this server's ledger key") == true) }
        await #expect(throws: CatalogueBacking.LogBroken.self, "nor any other row, backed or not") {
            _ = try await backing.asset { Self.asset("premium", bytes: "premium") }
        }
        await #expect(throws: CatalogueBacking.LogBroken.self, "nor at start") { _ = try await backing.unbacked(products: [], assets: []) }
        #expect(reports.all.count == 1 && reports.all[0].hasPrefix("the admin log does not verify at chain entry"), "\(reports.all)")
    }

    @Test("an asset is served only at its latest logged version: a newer version's row deleted does not bring back the older")
    func onlyTheLatestVersion() async throws {
        let log = Self.logged()
        let backing = CatalogueBacking(log, publicKey: Self.signer.publicKey)
        let first = Self.asset("level-1", bytes: "cheap")
        #expect(try await backing.asset { first } == first)
        let fixed = Self.asset("level-1", version: 2, bytes: "cheap, fixed")
        log.append(.assetUpload, "level-1", CatalogueLog.uploadDetail(fixed))
        #expect(try await backing.asset { fixed } == fixed)
        let refused = await #expect(throws: CatalogueBacking.Unbacked.self) { _ = try await backing.asset { first } }
        #expect(refused?.finding.kind == .assetVersionRemoved && refused?.finding.version == 2, "\(String(describing: refused))")
        // `adopt`'s forget of version 2 makes version 1 the latest again.
        log.append(.assetForget, "level-1", CatalogueLog.uploadDetail(fixed))
        #expect(try await backing.asset { first } == first)
    }

    @Test("a read of the log that hangs is a storage failure at the deadline for every row waiting on it, not a hung request; one read at a time")
    func aHungReadOfTheLogTimesOut() async throws {
        let log = Self.logged()
        let backing = CatalogueBacking(log, publicKey: Self.signer.publicKey, deadline: .milliseconds(300))
        #expect(try await backing.product { Self.product("cheap", ["level-1"]) } != nil)
        let before = log.eventReads
        log.stall(true)
        for _ in 0..<2 {
            let error = await #expect(throws: CatalogueBacking.TimedOut.self) { _ = try await backing.product { Self.product("cheap", ["level-1"]) } }
            #expect(error.map { $0 as any Error is any StorageFailure } == true, "a 503")
        }
        #expect(log.eventReads == before + 1, "the second row waits on the same read")
        log.stall(false)
        #expect(try await backing.product { Self.product("cheap", ["level-1"]) } != nil, "served once the read ends")
    }

    @Test("the start-up check lists every unbacked row; a failed read of the log is retried by the next read")
    func startupAndFailure() async throws {
        let log = Self.logged()
        let backing = CatalogueBacking(log, publicKey: Self.signer.publicKey)
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
