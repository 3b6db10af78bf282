import CofferCore
import CofferServer
import CofferStore
import Crypto
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// `DATA/ledger-high-water.json` (``LedgerHighWater``): checked and raised at start, at every
/// checkpoint interval and at shutdown (``LedgerHighWaterMark``), never lowered and never
/// moved to a chain that no longer holds it. Deleting it is the operator's way to accept a
/// ledger that went back (after checking it with their saved checkpoints).
struct LedgerHighWaterFile: LedgerHighWaterMark {
    let path: String
    /// The ledger key's public half: only a seal it signed raises the mark.
    let key: Curve25519.Signing.PublicKey

    /// The mark of `configuration`'s data directory, raised only to seals `signer` made.
    init(_ configuration: CofferConfiguration, signer: LedgerSigner) {
        self.init(path: DataDirectory(configuration.dataDirectory).ledgerHighWater, key: signer.publicKey)
    }

    init(path: String, key: Curve25519.Signing.PublicKey) {
        self.path = path
        self.key = key
    }

    /// The mark, or nil when there is no such file. A file that cannot be read or is not a
    /// mark is an error (fail closed: the operator deletes it on purpose).
    func read() throws -> LedgerHighWater? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT { return nil }
            throw LedgerStartupError.highWaterUnreadable(path)
        }
        let handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        do {
            return try JSONDecoder().decode(LedgerHighWater.self, from: try handle.readToEnd() ?? Data())
        } catch {
            throw LedgerStartupError.highWaterUnreadable(path)
        }
    }

    func check(_ ledger: any LedgerAuditRepository) async throws {
        try await check(ledger, against: try read())
    }

    /// Whether `ledger` holds `mark` (read earlier: `ledger copy` reads it before its snapshot).
    func check(_ ledger: any LedgerAuditRepository, against mark: LedgerHighWater?) async throws {
        guard let mark, mark.sequence > 0 else { return }
        let there = try await ledger.chainedEntries(after: mark.sequence - 1, limit: 1).first
        let hash = there?.entry.sequence == mark.sequence ? there?.entryHash : nil
        guard var problem = mark.problem(hashThere: hash) else { return }
        if hash == nil, try await ledger.chainedEntries(after: 0, limit: 1).isEmpty {
            problem += " — the ledger is empty: a new database? If you started a new ledger on purpose (the old one kept), delete the mark"
        }
        throw LedgerStartupError.behindHighWater(problem, path)
    }

    func raise(_ ledger: any LedgerAuditRepository) async throws {
        // The seal first, then the check: a seal read before a failover is one this chain
        // really had; the check after it makes sure the chain still holds the mark's entry.
        let seal = try await ledger.sealedHead()
        try await check(ledger)
        guard let seal, seal.isSigned(by: key) else { return }
        // The lock can wait for another instance's write, and the write fsyncs twice: on a
        // thread of their own, not the cooperative pool's.
        try await FileWriteThreads.run { [self] in
            try locked {
                guard LedgerHighWater.raises(seal, over: try read()) else { return }
                try write(LedgerHighWater(sequence: seal.sequence, entryHash: seal.entryHash, seenAt: Int64(Date().timeIntervalSince1970)))
            }
        }
    }

    /// Runs `body` holding an exclusive lock on `PATH.lock`: instances sharing the data
    /// directory read and raise the mark one at a time, so none lowers it.
    private func locked(_ body: () throws -> Void) throws {
        let fd = open(path + ".lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw Self.failure(errno) }
        defer { close(fd) }
        while flock(fd, LOCK_EX) != 0 {
            guard errno == EINTR else { throw Self.failure(errno) }
        }
        try body()
    }

    /// Written whole and durably: a new file of this process's own, flushed, renamed over the
    /// old, the directory flushed.
    private func write(_ mark: LedgerHighWater) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data = try encoder.encode(mark)
        let temporary = path + ".\(UUID().uuidString).tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw Self.failure(errno) }
        let file = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        do {
            try file.write(contentsOf: data)
            try file.synchronize()
            try file.close()
            guard rename(temporary, path) == 0 else { throw Self.failure(errno) }
        } catch {
            unlink(temporary)
            throw error
        }
        let directory = open((path as NSString).deletingLastPathComponent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directory >= 0 {
            _ = fsync(directory)
            close(directory)
        }
    }

    private static func failure(_ code: Int32) -> POSIXError { POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO) }
}
