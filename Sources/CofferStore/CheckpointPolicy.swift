import CofferCore
import Synchronization

/// How checkpoints are made: every `every` entries (inside the appending transaction) and,
/// by the server's checkpoint service, every few seconds when the head has moved.
public struct CheckpointPolicy: Sendable {
    public var signer: LedgerSigner
    public var every: Int64
    /// The signature of the last seal this process wrote or verified, so the check before each
    /// write costs a string compare, not an Ed25519 verification.
    let lastSeal = SealCache()

    final class SealCache: Sendable {
        private let value = Mutex<String?>(nil)
        func withLock<T>(_ body: (inout String?) -> T) -> T { value.withLock { body(&$0) } }
    }

    public init(signer: LedgerSigner, every: Int64 = 1000) {
        self.signer = signer
        self.every = max(1, every)
    }
}
