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
            let found: Row?
            do { found = try Row.fetchOne(db, sql: sql) } catch {
                // Rebuilt without rowids, as a view, or without a column the migrations make:
                // ``schemaDrift(_:)`` names how.
                problems.append("\(table) cannot be scanned as the migrations made it (\(error.localizedDescription))")
                continue
            }
            guard let row = found else { continue }
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
        try pristine().read { db in
            try auditedTables.map { table in
                let columns = try Row.fetchAll(db, sql: "PRAGMA table_info(\"\(table)\")").map { row in
                    (name: row["name"] as String? ?? "", type: (row["type"] as String? ?? "").uppercased())
                }
                return (table, columns)
            }
        }
    }

    /// A fresh in-memory database the migrations made: made once per process (the storage
    /// scan and the schema comparison read it at every verify and start-up).
    private static let migrated = Result { () throws -> DatabaseQueue in
        let pristine = try DatabaseQueue()
        try CofferDatabase.migrator().migrate(pristine)
        return pristine
    }

    private static func pristine() throws -> DatabaseQueue { try migrated.get() }

    /// How the audited tables differ from what the migrations make: each one's kind (a table
    /// with rowids), columns (names, declared types, NOT NULL, defaults, keys) and indexes
    /// (names, uniqueness, columns, collations, order). The rules compare through the file's
    /// schema: a column whose declared type was edited (`PRAGMA writable_schema`) to INTEGER
    /// turns the text bound in `WHERE replay_key = ?` into a number that never equals the text
    /// stored, while every value still reads back, hashes and scans as before.
    static func schemaDrift(_ db: Database) throws -> [String] {
        func shape(_ db: Database, _ table: String) throws -> [String] {
            let kind = try Row.fetchOne(db, sql: "SELECT type, sql FROM sqlite_master WHERE name = ?", arguments: [table])
            var lines = [
                "kind \(kind?["type"] as String? ?? "missing")"
                    + ((kind?["sql"] as String?)?.uppercased().contains("WITHOUT ROWID") == true ? " without rowid" : "")
            ]
            lines += try Row.fetchAll(db, sql: "PRAGMA table_xinfo(\"\(table)\")").map { row in
                let name: String = row["name"] ?? ""
                let type: String = row["type"] ?? ""
                let notNull: Int = row["notnull"] ?? 0
                let pk: Int = row["pk"] ?? 0
                let hidden: Int = row["hidden"] ?? 0
                return
                    "column \(name) \(type.uppercased()) notnull=\(notNull) default=\(row["dflt_value"] as String? ?? "-") pk=\(pk) hidden=\(hidden)"
            }
            for index in try Row.fetchAll(db, sql: "PRAGMA index_list(\"\(table)\")").sorted(by: {
                ($0["name"] as String? ?? "") < ($1["name"] as String? ?? "")
            }) {
                let name: String = index["name"] ?? ""
                let unique: Int = index["unique"] ?? 0
                let partial: Int = index["partial"] ?? 0
                let columns = try Row.fetchAll(db, sql: "PRAGMA index_xinfo(\"\(name)\")").filter { ($0["key"] as Int? ?? 0) == 1 }.map { column in
                    "\(column["name"] as String? ?? "expr") \(column["coll"] as String? ?? "") desc=\(column["desc"] as Int? ?? 0)"
                }
                let named = name.hasPrefix("sqlite_autoindex_") ? "autoindex" : name
                lines.append("index \(named) unique=\(unique) partial=\(partial) (\(columns.joined(separator: ", ")))")
            }
            return lines
        }
        let expected = try pristine().read { db in try auditedTables.map { try shape(db, $0) } }
        var problems: [String] = []
        for (table, want) in zip(auditedTables, expected) {
            let have = try shape(db, table)
            if have != want {
                let differing = Set(have).symmetricDifference(want).sorted().prefix(3).map { LedgerText.escaped($0, maxBytes: 160) }
                problems.append("\(table) is not as the migrations made it (\(differing.joined(separator: "; ")))")
            }
        }
        return problems
    }
}
