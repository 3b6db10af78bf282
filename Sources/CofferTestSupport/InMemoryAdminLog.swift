import CofferCore
import Foundation

/// In-memory admin log.
public actor InMemoryAdminLog: AdminLogRepository {
    private var rows: [AdminAction] = []

    public init() {}

    public func record(_ action: AdminAction) {
        var row = action
        row.sequence = Int64(rows.count + 1)
        rows.append(row)
    }

    public func actions(after: Int64, limit: Int) -> [AdminAction] {
        Array(rows.lazy.filter { $0.sequence > after }.prefix(max(0, limit)))
    }
}
