import CofferCore
import Foundation

// The admin log is chained in the ledger's hash chain (as in the SQLite store), so the
// ledger itself is the admin log.
extension InMemoryLedger: AdminLogRepository {
    /// Records an action with its text fields escaped and capped as the SQLite admin log does.
    public func record(_ a: AdminAction) throws {
        try checkAdminLogWritable()
        try sealed(now: a.at) { try appendAdminAction(a) }
    }

    public func actions(after: Int64, limit: Int) -> [AdminAction] {
        Array(adminRows.lazy.filter { $0.sequence > after }.prefix(max(0, limit)))
    }

    /// While `fail` is set, every admin-log write throws ``InMemoryStorageError/adminLogUnavailable``
    /// before anything of its change is stored, as a failed transaction stores nothing: for
    /// tests that a change is never made without its entry.
    public func failAdminLogWrites(_ fail: Bool) { adminLogFails = fail }

    /// Throws while admin-log writes fail.
    func checkAdminLogWritable() throws {
        if adminLogFails { throw InMemoryStorageError.adminLogUnavailable }
    }

    /// Stores and chains an action, escaped (inside a sealed write, after ``checkAdminLogWritable()``).
    func appendAdminAction(_ a: AdminAction) throws {
        var action = AdminAction.escapedForLedger(a)
        action.sequence = Int64(adminRows.count + 1)
        let stored = action
        try chain.append(now: a.at) { .adminAction(stored, sequence: $0) }
        adminRows.append(stored)
    }
}
