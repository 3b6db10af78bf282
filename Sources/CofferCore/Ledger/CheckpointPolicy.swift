import Foundation
import Synchronization

/// How checkpoints are made: every `every` entries (inside the appending transaction) and,
/// by the server's checkpoint service, every few seconds when the head has moved.
public struct CheckpointPolicy: Sendable {
    public var signer: LedgerSigner
    public var every: Int64
    /// The last seal this process wrote or verified — the whole seal, not its signature alone
    /// (a valid signature copied onto another head must not pass) — so the check before each
    /// write costs a compare, not an Ed25519 verification.
    package let lastSeal = SealCache()

    package final class SealCache: Sendable {
        private let value = Mutex<LedgerCheckpoint?>(nil)
        package func withLock<T>(_ body: (inout LedgerCheckpoint?) -> T) -> T { value.withLock { body(&$0) } }
    }

    public init(signer: LedgerSigner, every: Int64 = 1000) {
        self.signer = signer
        self.every = max(1, every)
    }
}

// The seal: every backend stores the chain's head signed with the policy's key, checks it before
// each transaction that appends and rewrites it after; the rules are here, the storage is theirs.
extension CheckpointPolicy {
    /// Throws unless the chain whose last entry is `headSequence` / `headHash` ends exactly where
    /// `sealed` says, under this policy's key. A chain with no seal yet (written before the seal
    /// existed) passes when `covering` — the checkpoint at `headSequence`, which the caller looks
    /// up only when `sealed` is nil — is one of this key over the same hash (a clean shutdown).
    public func verifySeal(_ sealed: LedgerCheckpoint?, headSequence: Int64, headHash: String, covering: LedgerCheckpoint?) throws {
        guard let sealed else {
            guard headSequence > 0 else { return }
            guard let covering, covering.sequence == headSequence, covering.entryHash == headHash, covering.isSigned(by: signer.publicKey) else {
                throw LedgerIntegrityError.unsealed(head: headSequence)
            }
            return
        }
        if lastSeal.withLock({ $0 }) != sealed {
            // Ed25519 is deterministic: the same key over the same message gives the same
            // signature, and signing costs about half a verification. Instances sharing the key
            // check each other's seals that way; anything else is verified.
            let resigned = try? signer.checkpoint(sequence: sealed.sequence, entryHash: sealed.entryHash, time: sealed.time)
            guard resigned == sealed || sealed.isSigned(by: signer.publicKey) else { throw LedgerIntegrityError.sealNotSigned(keyId: signer.keyId) }
            lastSeal.withLock { $0 = sealed }
        }
        guard sealed.sequence == headSequence, sealed.entryHash == headHash else {
            throw LedgerIntegrityError.sealMismatch(sealed: sealed.sequence, actual: headSequence)
        }
    }

    /// Signs the head `headSequence` / `headHash` as the new seal and remembers its signature
    /// (the next check then costs a string compare).
    public func seal(headSequence: Int64, headHash: String, now: Date) throws -> LedgerCheckpoint {
        let sealed = try signer.checkpoint(sequence: headSequence, entryHash: headHash, time: Int64(now.timeIntervalSince1970))
        lastSeal.withLock { $0 = sealed }
        return sealed
    }
}
