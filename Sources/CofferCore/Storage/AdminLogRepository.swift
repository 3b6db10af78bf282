/// The admin audit log: append-only.
public protocol AdminLogRepository: Sendable {
    func record(_ action: AdminAction) async throws
    /// Actions after `after` (a sequence cursor), oldest first, at most `limit`.
    func actions(after: Int64, limit: Int) async throws -> [AdminAction]
}
