import CofferCore
import GRDB

extension AuditFilter {
    /// The rows of `record` this filter selects: `sequence > after`, each set value of `equal`
    /// in its column, `from` (inclusive) and `to` (exclusive) on the REAL unix-seconds column
    /// `time`; in ledger order, at most `limit`.
    func request<Record: TableRecord>(
        _ record: Record.Type, sequence: Column, time: Column, equal: KeyValuePairs<Column, String?>
    ) -> QueryInterfaceRequest<Record> {
        var request = Record.filter(sequence > after)
        for case (let column, let value?) in equal { request = request.filter(column == value) }
        if let from { request = request.filter(time >= from.timeIntervalSince1970) }
        if let to { request = request.filter(time < to.timeIntervalSince1970) }
        return request.order(sequence).limit(Swift.max(0, limit))
    }
}
