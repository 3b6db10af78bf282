/// The attempts a ledger records in the same write as a refused insert.
public struct InsertRefusals: Sendable, Hashable {
    /// Recorded when the insert is a replay (`.alreadyRedeemed`).
    public var replay: RejectedAttempt
    /// Recorded when a kept revocation refuses it (`.revoked`).
    public var revoked: RejectedAttempt

    public init(replay: RejectedAttempt, revoked: RejectedAttempt) {
        self.replay = replay
        self.revoked = revoked
    }
}
