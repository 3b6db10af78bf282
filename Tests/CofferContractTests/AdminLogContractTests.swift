import CofferCore
import CofferTestSupport
import Foundation
import Testing

/// ``AdminLogRepository``: the append-only admin log, chained with the ledger.
@Suite("Admin log contract")
struct AdminLogContractTests {
    static func action(_ index: Int) -> AdminAction {
        AdminAction(
            at: instant(Double(index)), keyId: "k-\(index % 2)", keyName: "admin \(index % 2)",
            action: index % 3 == 0 ? "asset.upload" : "product.put",
            target: "target-\(index)", detail: "detail \(index)", clientAddress: "192.0.2.\(index)")
    }

    @Test("record then page: sequences 1, 2, 3…, oldest first, every field kept", arguments: Backend.allCases)
    func recordAndPage(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let log = storage.adminLog
            #expect(try await log.actions(after: 0, limit: 10).isEmpty)
            let written = (1...7).map(Self.action)
            for action in written { try await log.record(action) }
            let all = try await log.actions(after: 0, limit: 100)
            #expect(all.map(\.sequence) == Array(1...7))
            #expect(
                all.map {
                    var a = $0; a.sequence = 0; return a
                } == written)
            var pages: [[Int64]] = []
            var after: Int64 = 0
            while true {
                let page = try await log.actions(after: after, limit: 3)
                guard let last = page.last else { break }
                pages.append(page.map(\.sequence))
                after = last.sequence
            }
            #expect(pages == [[1, 2, 3], [4, 5, 6], [7]])
            #expect(try await log.actions(after: 7, limit: 3).isEmpty)
            #expect(try await log.actions(after: 0, limit: 0).isEmpty)
            #expect(try await log.actions(after: 0, limit: -1).isEmpty)
        }
    }

    @Test("text fields are escaped and capped as they are stored and hashed", arguments: Backend.allCases)
    func escaped(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            let raw = AdminAction(
                at: instant(0), keyId: "k", keyName: "name\u{0}\n", action: "product.put\u{7}", target: String(repeating: "t", count: 600),
                detail: "line 1\nline 2\u{2028}", clientAddress: "192.0.2.1")
            try await storage.adminLog.record(raw)
            let stored = try #require(try await storage.adminLog.actions(after: 0, limit: 1).first)
            #expect(stored.keyName == LedgerText.escaped(raw.keyName, maxBytes: 128))
            #expect(stored.action == LedgerText.escaped(raw.action, maxBytes: 64))
            #expect(stored.target == LedgerText.escaped(raw.target, maxBytes: 512))
            #expect(stored.target.utf8.count <= 512)
            #expect(stored.detail == #"line 1\u{A}line 2\u{2028}"#)
            #expect(stored.keyId == "k" && stored.clientAddress == "192.0.2.1" && stored.at == raw.at)
        }
    }

    @Test("every action is an entry of the ledger's chain, after the ledger's own", arguments: Backend.allCases)
    func chained(backend: Backend) async throws {
        try await backend.withStorage { storage async throws in
            _ = try await storage.ledger.insert(makeRedemption("1"))
            try await storage.adminLog.record(Self.action(1))
            try await storage.ledger.record(makeAttempt(code: "replay", transactionId: "1"))
            try await storage.adminLog.record(Self.action(2))
            let entries = try await storage.ledgerAudit.chainedEntries(after: 0, limit: 10)
            #expect(entries.map(\.entry.kind) == [.redemption, .adminAction, .attempt, .adminAction])
            #expect(entries.map(\.entry.row) == [1, 1, 1, 2])
            let stored = try await storage.adminLog.actions(after: 0, limit: 10)
            #expect(entries[3].entry == LedgerEntry.adminAction(stored[1], sequence: 4))
        }
    }
}
