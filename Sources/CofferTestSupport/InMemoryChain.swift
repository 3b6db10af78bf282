import CofferCore
import Foundation

/// The hash chain of an in-memory ledger, kept as the SQLite ledger keeps it: every row
/// appends one ``LedgerEntry`` (``LedgerChain/hash(previous:entry:)`` over the previous hash),
/// a checkpoint is signed every `every` entries, and the seal — a checkpoint of the head — is
/// rewritten after every write. Without a signer there are no checkpoints and no seal.
struct InMemoryChain: Sendable {
    let signer: LedgerSigner?
    let every: Int64
    private(set) var entries: [ChainedEntry] = []
    private(set) var checkpoints: [LedgerCheckpoint] = []
    private(set) var seal: LedgerCheckpoint?
    private var head = LedgerChain.genesis

    init(signer: LedgerSigner?, every: Int64) {
        self.signer = signer
        self.every = max(1, every)
    }

    /// The sequence number the next entry gets.
    var nextSequence: Int64 { Int64(entries.count) + 1 }

    /// Appends the entry `entry(sequence)` and signs a checkpoint when the sequence is a
    /// multiple of `every`. Refuses (before changing anything) a value holding U+0000, as the
    /// SQLite store does: such a value would be hashed whole but read back cut.
    mutating func append(now: Date, _ entry: (Int64) -> LedgerEntry) throws {
        let event = entry(nextSequence)
        if event.values.contains(where: { $0?.utf8.contains(0) == true }) {
            throw InMemoryStorageError.invalidValue("a \(event.kind.rawValue) value holding U+0000")
        }
        let hash = LedgerChain.hash(previous: head, entry: event)
        let checkpoint = try signer.flatMap { signer in
            event.sequence % every == 0 ? try signer.checkpoint(sequence: event.sequence, entryHash: hash.hexString, time: Self.time(now)) : nil
        }
        entries.append(ChainedEntry(entry: event, entryHash: hash.hexString))
        head = hash
        if let checkpoint { checkpoints.append(checkpoint) }
    }

    /// Signs the head as the seal (after a write, like the SQLite ledger's `sealed` transaction).
    mutating func sealHead(now: Date) throws {
        guard let signer, let last = entries.last else { return }
        seal = try signer.checkpoint(sequence: last.entry.sequence, entryHash: last.entryHash, time: Self.time(now))
    }

    /// Signs the head unless a checkpoint already covers it.
    mutating func checkpointHead(now: Date) throws -> LedgerCheckpoint? {
        try checkSeal()
        guard let signer, let last = entries.last, last.entry.sequence > (checkpoints.last?.sequence ?? 0) else { return nil }
        let checkpoint = try signer.checkpoint(sequence: last.entry.sequence, entryHash: last.entryHash, time: Self.time(now))
        checkpoints.append(checkpoint)
        return checkpoint
    }

    /// Throws unless the seal is this signer's and covers the head exactly.
    func checkSeal() throws {
        guard let signer, let last = entries.last else { return }
        guard let seal, seal.isSigned(by: signer.publicKey), seal.sequence == last.entry.sequence, seal.entryHash == last.entryHash else {
            throw InMemoryStorageError.sealBroken
        }
    }

    func entries(after: Int64, limit: Int) -> [ChainedEntry] {
        Array(entries.lazy.filter { $0.entry.sequence > after }.prefix(max(0, limit)))
    }

    func checkpoints(after: Int64, limit: Int) -> [LedgerCheckpoint] {
        Array(checkpoints.lazy.filter { $0.sequence > after }.prefix(max(0, limit)))
    }

    /// Unix seconds, as checkpoints carry them.
    static func time(_ date: Date) -> Int64 { Int64(date.timeIntervalSince1970) }
}
