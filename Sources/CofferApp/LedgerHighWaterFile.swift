import CofferCore
import CofferServer
import Crypto
import Foundation
import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// `DATA/ledger-high-water.json` (``LedgerHighWater``): checked and raised at start, at every
/// checkpoint interval and at shutdown (``LedgerHighWaterMark``), never lowered and never
/// moved to a chain that no longer holds it. Deleting it is the operator's way to accept a
/// ledger that went back (after checking it with their saved checkpoints).
struct LedgerHighWaterFile: LedgerHighWaterMark {
    let path: String
    /// The ledger key's public half: only a seal it signed raises the mark.
    let key: Curve25519.Signing.PublicKey

    init(dataDirectory: String, key: Curve25519.Signing.PublicKey) {
        path = DataDirectory(dataDirectory).ledgerHighWater
        self.key = key
    }

    /// The mark, or nil when there is no file. A file that cannot be read or is not a mark
    /// is an error (fail closed: the operator deletes it on purpose).
    func read() throws -> LedgerHighWater? {
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        do {
            return try JSONDecoder().decode(LedgerHighWater.self, from: try Data(contentsOf: URL(fileURLWithPath: path)))
        } catch {
            throw LedgerStartupError.highWaterUnreadable(path)
        }
    }

    func check(_ ledger: any LedgerAuditRepository) async throws {
        guard let mark = try read(), mark.sequence > 0 else { return }
        let there = try await ledger.chainedEntries(after: mark.sequence - 1, limit: 1).first
        let hash = there?.entry.sequence == mark.sequence ? there?.entryHash : nil
        guard var problem = mark.problem(hashThere: hash) else { return }
        if hash == nil, try await ledger.chainedEntries(after: 0, limit: 1).isEmpty {
            problem += " — the ledger is empty: a new database? If you started a new ledger on purpose (the old one kept), delete the mark"
        }
        throw LedgerStartupError.behindHighWater(problem, path)
    }

    func raise(_ ledger: any LedgerAuditRepository) async throws {
        try await check(ledger)
        guard let seal = try await ledger.sealedHead(), LedgerHighWater.raises(seal, over: try read()), seal.isSigned(by: key) else { return }
        try write(LedgerHighWater(sequence: seal.sequence, entryHash: seal.entryHash, seenAt: Int64(Date().timeIntervalSince1970)))
    }

    /// Written whole and durably: a new file, flushed, renamed over the old, the directory
    /// flushed. Instances sharing the directory may race; each write is a seal one of them saw.
    private func write(_ mark: LedgerHighWater) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data = try encoder.encode(mark)
        let temporary = path + ".\(getpid()).tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        let written = data.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        let synced = fsync(fd)
        close(fd)
        guard written == data.count, synced == 0, rename(temporary, path) == 0 else {
            let code = POSIXErrorCode(rawValue: errno) ?? .EIO
            unlink(temporary)
            throw POSIXError(code)
        }
        let directory = open((path as NSString).deletingLastPathComponent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directory >= 0 {
            _ = fsync(directory)
            close(directory)
        }
    }
}
