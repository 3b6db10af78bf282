import CofferCore
import GRDB

extension ChainStore {
    /// The tables whose values the chain hashes, the rules compare or the catalogue audit reads.
    static let auditedTables = [
        "redemptions", "attempts", "revocations", "admin_actions", "purchase_events", "ledger_events", "ledger_checkpoints", "ledger_head",
        "products", "assets",
    ]

    /// Values the chain would hash as one thing while SQL compares another: a row reads back
    /// through SQLite's C string readers (GRDB decodes a TEXT or BLOB column with
    /// `sqlite3_column_text`, which stops at the first U+0000 and turns a BLOB's bytes into
    /// text), but the replay and revocation rules compare the stored bytes. A BLOB `Production`,
    /// or `Production` with a NUL after it, is hashed as `Production` and never equals it in a
    /// `WHERE`: the redemption it sits in stops refusing its purchase, a revocation stops
    /// revoking, and the chain still verifies. Only someone who drops the append-only triggers
    /// (the file's holder) can store one; the server never does (``append(_:policy:now:entry:)``).
    ///
    /// Each column must hold the storage class its declared type gives (TEXT: text; INTEGER:
    /// integer; REAL: real or integer, which compare equal), NULL, and text no U+0000. The
    /// declared types are read from a fresh database the migrations made, not from this file's
    /// schema, which its holder may edit. One scan per table, at most one finding each.
    static func storageProblems(_ db: Database) throws -> [String] {
        let expected = try expectedColumns()
        var problems: [String] = []
        for (table, columns) in expected where !columns.isEmpty {
            let checks = columns.map { column -> (name: String, condition: String) in
                let quoted = "\"\(column.name)\""
                let condition: String
                switch column.type {
                case "TEXT": condition = "typeof(\(quoted)) NOT IN ('text', 'null') OR instr(CAST(\(quoted) AS BLOB), x'00') > 0"
                case "INTEGER": condition = "typeof(\(quoted)) NOT IN ('integer', 'null')"
                case "REAL": condition = "typeof(\(quoted)) NOT IN ('real', 'integer', 'null')"
                default: condition = "typeof(\(quoted)) = 'blob'"
                }
                return (column.name, condition)
            }
            let which = checks.map { "WHEN \($0.condition) THEN '\($0.name)'" }.joined(separator: " ")
            let any = checks.map { "(\($0.condition))" }.joined(separator: " OR ")
            let sql = "SELECT rowid AS r, CASE \(which) END AS c FROM \"\(table)\" WHERE \(any) LIMIT 1"
            guard let row = try Row.fetchOne(db, sql: sql) else { continue }
            let column: String = row["c"] ?? "?"
            let declared = columns.first { $0.name == column }?.type
            let stored = try String.fetchOne(
                db, sql: "SELECT typeof(\"\(column)\") FROM \"\(table)\" WHERE rowid = ?", arguments: [row["r"] as Int64?])
            problems.append(
                "\(table) row \(row["r"] as Int64? ?? 0): \(column) holds "
                    + (stored == "text" && declared == "TEXT" ? "text with a U+0000 in it" : "a \(stored ?? "?") value")
                    + ", which the server never writes (it reads back as other text than the rules compare)")
        }
        return problems
    }

    /// The audited tables' columns and declared types, as the migrations make them.
    private static func expectedColumns() throws -> [(table: String, columns: [(name: String, type: String)])] {
        let pristine = try DatabaseQueue()
        try CofferDatabase.migrator().migrate(pristine)
        return try pristine.read { db in
            try auditedTables.map { table in
                let columns = try Row.fetchAll(db, sql: "PRAGMA table_info(\"\(table)\")").map { row in
                    (name: row["name"] as String? ?? "", type: (row["type"] as String? ?? "").uppercased())
                }
                return (table, columns)
            }
        }
    }
}
