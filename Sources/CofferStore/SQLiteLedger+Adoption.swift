import CofferCore

extension SQLiteLedger {
    /// What ``adopt(by:now:reseal:)`` did.
    public struct Adoption: Sendable, Hashable {
        /// Rows chained, by kind.
        public var chained: [LedgerEventKind: Int]
        /// The admin action that records the adoption (itself chained, last).
        public var action: AdminAction
        /// The catalogue rows the log did not back, each now vouched for by an entry before the
        /// adoption's (except an unreadable product row, which still needs mending).
        public var catalogue: [CatalogueFinding] = []
    }
}
