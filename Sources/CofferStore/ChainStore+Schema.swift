import GRDB

extension ChainStore {
    /// The schema objects the ledger's guarantees rest on, missing or altered (empty when intact):
    /// the append-only triggers and the unique indexes of the replay rule.
    static func schemaProblems(_ db: Database) throws -> [String] {
        var problems: [String] = []
        let triggers = Set(try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'trigger'"))
        for table in ["redemptions", "attempts", "revocations", "ledger_events", "ledger_checkpoints", "admin_actions", "purchase_events"] {
            for operation in ["update", "delete"] where !triggers.contains("\(table)_no_\(operation)") {
                problems.append("trigger \(table)_no_\(operation) is missing")
            }
        }
        for (table, index) in [
            ("redemptions", "redemptions_replay"), ("revocations", "revocations_key"), ("purchase_events", "purchase_events_notification"),
        ] {
            let unique = try Row.fetchAll(db, sql: "PRAGMA index_list(\(table))").first { ($0["name"] as String?) == index }?["unique"] as Int?
            if unique != 1 { problems.append("unique index \(index) is missing or not unique") }
        }
        // The catalogue must be read as stored: a view in a table's place could show an audit
        // one thing and the server another.
        let kinds = Dictionary(
            try Row.fetchAll(db, sql: "SELECT name, type FROM sqlite_master WHERE name IN ('products', 'assets')").map {
                ($0["name"] as String? ?? "", $0["type"] as String? ?? "")
            }, uniquingKeysWith: { a, _ in a })
        for table in ["products", "assets"] where kinds[table] != "table" {
            problems.append("\(table) is not a plain table (\(kinds[table] ?? "missing"))")
        }
        problems += try schemaDrift(db)
        return problems
    }
}
