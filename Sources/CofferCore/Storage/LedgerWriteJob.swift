/// One write of a group-commit ledger writer (``GroupCommitQueue``): a redemption or an
/// attempt, with the continuation its caller awaits.
public enum LedgerWriteJob: Sendable {
    /// A redemption, and the attempts to record instead if it is refused.
    case redemption(Redemption, InsertRefusals?, CheckedContinuation<LedgerInsertOutcome, any Error>)
    /// An attempt; the continuation is nil for one recorded as a redemption's refusal.
    case attempt(RejectedAttempt, CheckedContinuation<Void, any Error>?)

    /// What became of a job in its batch.
    public enum Result: Sendable {
        case inserted(Redemption)
        case alreadyRedeemed
        case revoked(Revocation)
        case recorded
        case failed(any Error)
    }

    /// Answers the caller with the job's result (once its transaction committed).
    public func answer(_ result: Result) {
        switch (self, result) {
        case (.redemption(_, _, let c), .inserted(let row)): c.resume(returning: .inserted(row))
        case (.redemption(_, _, let c), .alreadyRedeemed): c.resume(returning: .alreadyRedeemed)
        case (.redemption(_, _, let c), .revoked(let revocation)): c.resume(returning: .revoked(revocation))
        case (.redemption(_, _, let c), .failed(let error)): c.resume(throwing: error)
        case (.attempt(_, let c), .failed(let error)): c?.resume(throwing: error)
        case (.attempt(_, let c), _): c?.resume()
        case (.redemption(_, _, let c), .recorded): c.resume(throwing: LedgerWriteError.noOutcome)
        }
    }

    /// Answers the caller with `error` (its transaction did not commit, or the writer has finished).
    public func fail(_ error: any Error) { answer(.failed(error)) }
}

/// A writer answered a redemption without an outcome (a bug, never expected).
public struct LedgerWriteError: Error, Sendable, Hashable, CustomStringConvertible {
    public static let noOutcome = LedgerWriteError()
    public var description: String { "the ledger writer gave a redemption no outcome" }
}

/// A writer that gave no outcome failed as storage does: 503 `storageUnavailable`, never a 500.
extension LedgerWriteError: StorageFailure {}
