import Crypto
import Foundation

/// Chain entries checked against the ledger key's signatures without reading the whole chain:
/// from the stored hash of an entry's predecessor, the hash of every entry up to the first
/// checkpoint signed at or after it (or the seal, the signed head) must come out as signed.
/// SHA-256 makes that hash a commitment to every entry in between: an entry edited, inserted,
/// re-pointed at another row or given a recomputed hash would need a collision to pass. Cost:
/// the entries up to that checkpoint — the server signs one every few seconds while the head
/// moves, and every `checkpointEvery` entries.
public enum SignedWindow {
    /// The entries at some position could not be checked against a signature.
    public struct Failure: Error, Sendable, Hashable, CustomStringConvertible {
        public var sequence: Int64
        public var reason: String
        public var description: String { "chain entry \(sequence): \(reason)" }
    }

    /// The entries at `sequences` (ascending), as read and hashed, once each is shown to be the
    /// entry the ledger key signed over. Throws ``Failure`` when one is not (and the store's
    /// errors as they are).
    public static func entries(
        at sequences: [Int64], in ledger: any LedgerAuditRepository, publicKey: Curve25519.Signing.PublicKey, page: Int = 500
    ) async throws -> [LedgerEntry] {
        var out: [LedgerEntry] = []
        var wanted = sequences.sorted()[...]
        while let first = wanted.first {
            let signed = try await signedPoint(atOrAfter: first, in: ledger, publicKey: publicKey)
            var hash: [UInt8]
            if first == 1 {
                hash = LedgerChain.genesis
            } else {
                guard let before = try await ledger.chainedEntries(after: first - 2, limit: 1).first, before.entry.sequence == first - 1,
                    let stored = Hex.decode(before.entryHash), stored.count == 32
                else { throw Failure(sequence: first - 1, reason: "missing or unreadable") }
                hash = stored
            }
            var at = first - 1
            // Where the stored hashes part from the recomputed ones: the entry edited, unless
            // its hash was recomputed too.
            var diverged: Int64?
            while at < signed.sequence {
                let entries = try await ledger.chainedEntries(after: at, limit: Int(min(Int64(page), signed.sequence - at)))
                guard !entries.isEmpty else { throw Failure(sequence: at + 1, reason: "missing (the checkpoint at \(signed.sequence) signs it)") }
                for chained in entries where at < signed.sequence {
                    guard chained.entry.sequence == at + 1 else { throw Failure(sequence: at + 1, reason: "missing") }
                    at += 1
                    hash = LedgerChain.hash(previous: hash, entry: chained.entry)
                    if diverged == nil && Hex.encode(hash) != chained.entryHash { diverged = at }
                    if wanted.first == at {
                        out.append(chained.entry)
                        wanted.removeFirst()
                    }
                }
            }
            guard Hex.encode(hash) == signed.entryHash else {
                throw Failure(
                    sequence: diverged ?? first,
                    reason:
                        "the entries \(first)–\(signed.sequence) do not hash to what the checkpoint at \(signed.sequence) signs (edited, re-pointed or inserted behind the server's back)"
                )
            }
        }
        return out
    }

    /// The first checkpoint at or after `sequence`, or the seal, signed by `publicKey`.
    static func signedPoint(atOrAfter sequence: Int64, in ledger: any LedgerAuditRepository, publicKey: Curve25519.Signing.PublicKey)
        async throws -> LedgerCheckpoint
    {
        var found = try await ledger.checkpoints(after: sequence - 1, limit: 1).first
        if found == nil, let seal = try await ledger.sealedHead(), seal.sequence >= sequence { found = seal }
        guard let found else { throw Failure(sequence: sequence, reason: "no checkpoint or seal covers it yet") }
        guard found.isSigned(by: publicKey) else {
            throw Failure(sequence: sequence, reason: "the checkpoint at \(found.sequence) is not signed by this server's ledger key")
        }
        return found
    }
}
