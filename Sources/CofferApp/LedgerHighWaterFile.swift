import CofferCore
import CofferServer
import Foundation
import Logging

/// `DATA/ledger-high-water.json` (``LedgerHighWater``): read at start, raised at start and at
/// every checkpoint interval, never lowered by Coffer. Deleting it is the operator's way to
/// accept a ledger that went back (after checking it with their saved checkpoints).
struct LedgerHighWaterFile: Sendable {
    let path: String

    init(dataDirectory: String) { path = DataDirectory(dataDirectory).ledgerHighWater }

    /// The mark, or nil when there is none yet. A file that is not a mark is an error (fail
    /// closed: the operator deletes it on purpose).
    func read() throws -> LedgerHighWater? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        do { return try JSONDecoder().decode(LedgerHighWater.self, from: data) } catch {
            throw LedgerStartupError.highWaterUnreadable(path)
        }
    }

    /// Raises the mark to `seal` when it is further than the mark (written whole: a new file
    /// renamed over the old). Instances sharing the directory may race; each write is one of
    /// the seals they saw.
    func raise(to seal: LedgerCheckpoint, now: Date = Date()) throws {
        guard LedgerHighWater.raises(seal, over: try? read()) else { return }
        let mark = LedgerHighWater(sequence: seal.sequence, entryHash: seal.entryHash, seenAt: Int64(now.timeIntervalSince1970))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try encoder.encode(mark).write(to: URL(fileURLWithPath: path), options: .atomic)
    }

    /// ``raise(to:now:)`` for the checkpoint service, which logs rather than stops.
    func recorder(logger: Logger) -> @Sendable (LedgerCheckpoint) -> Void {
        { seal in
            do { try raise(to: seal) } catch {
                logger.error("the ledger's high-water mark could not be written", metadata: ["path": "\(path)", "error": "\(error)"])
            }
        }
    }
}

extension StartupCheckedLedger where Self: LedgerAuditRepository {
    /// Refuses a ledger that ends before, or differs at, the data directory's high-water mark;
    /// then raises the mark to the seal as it stands.
    func checkHighWater(_ file: LedgerHighWaterFile) async throws {
        if let mark = try file.read(), mark.sequence > 0 {
            let there = try await chainedEntries(after: mark.sequence - 1, limit: 1).first
            let hash = there?.entry.sequence == mark.sequence ? there?.entryHash : nil
            if let problem = mark.problem(hashThere: hash) { throw LedgerStartupError.behindHighWater(problem, file.path) }
        }
        if let seal = try await sealedHead() { try file.raise(to: seal) }
    }
}
