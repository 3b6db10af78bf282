import CofferCore
import Crypto
import Foundation
import PostgresNIO

// MARK: - The chain, checkpoints and the seal

extension PostgresLedger: LedgerAuditRepository, CatalogueLogSource {
    /// Key of the advisory lock whose holder signs this round's checkpoint ("coffchkp"): the
    /// instances' checkpoint services tick independently, one at a time signs.
    static let checkpointLock: Int64 = 0x636f_6666_6368_6b70

    public func chainedEntries(after: Int64, limit: Int) async throws -> [ChainedEntry] {
        try await events(after: after, limit: limit).map(\.chainedEntry)
    }

    /// Ledger events after `after`, in order, joined with their rows. Like the checkpoints and
    /// the seal below, flushed before they are returned (``PostgresChain/flushed(_:logger:_:)``):
    /// a writer's batch is visible before its flush (migration 0005).
    public func events(after: Int64, limit: Int) async throws -> [StoredEvent] {
        try await backend.read { c in
            try await PostgresChain.flushed(c, logger: backend.logger) {
                try await Self.events(c, after: after, limit: limit, logger: backend.logger)
            }
        }
    }

    public func adminEvents(after: Int64, limit: Int) async throws -> [Int64] {
        try await backend.read { c in
            try await PostgresChain.flushed(c, logger: backend.logger) {
                try await c.column(
                    "SELECT sequence FROM ledger_events WHERE kind = 'adminAction' AND sequence > \(after) ORDER BY sequence LIMIT \(max(0, limit))",
                    Int64.self, logger: backend.logger)
            }
        }
    }

    public func adminRows(after: Int64, limit: Int) async throws -> [Int64] {
        try await backend.read { c in
            try await PostgresChain.flushed(c, logger: backend.logger) {
                try await c.column(
                    "SELECT sequence FROM admin_actions WHERE sequence > \(after) ORDER BY sequence LIMIT \(max(0, limit))", Int64.self,
                    logger: backend.logger)
            }
        }
    }

    public func eventCount(after: Int64, through: Int64) async throws -> Int64 {
        try await backend.read { c in
            try await PostgresChain.flushed(c, logger: backend.logger) {
                try await c.column(
                    "SELECT count(*) FROM ledger_events WHERE sequence > \(after) AND sequence <= \(through)", Int64.self, logger: backend.logger
                ).first ?? 0
            }
        }
    }

    public func checkpoints(after: Int64, limit: Int) async throws -> [LedgerCheckpoint] {
        try await backend.read { c in
            try await PostgresChain.flushed(c, logger: backend.logger) {
                try await PostgresChain.checkpoints(c, after: after, limit: limit, logger: backend.logger)
            }
        }
    }

    public func latestCheckpoint() async throws -> LedgerCheckpoint? {
        try await backend.read { c in
            try await PostgresChain.flushed(c, logger: backend.logger) {
                try await PostgresChain.latestCheckpoint(c, logger: backend.logger)
            }
        }
    }

    public func sealedHead() async throws -> LedgerCheckpoint? {
        try await backend.read { c in
            try await PostgresChain.flushed(c, logger: backend.logger) {
                try await PostgresChain.sealedHead(c, logger: backend.logger)
            }
        }
    }

    /// Signs the chain's head unless a checkpoint covers it already — when this instance wins
    /// this round's advisory lock (another instance signing now makes this a no-op: nil).
    @discardableResult
    public func checkpointHead(now: Date) async throws -> LedgerCheckpoint? {
        guard let policy = checkpoints else { return nil }
        let logger = backend.logger
        return try await backend.transaction { c -> LedgerCheckpoint? in
            let leader = try await c.column("SELECT pg_try_advisory_xact_lock(\(Self.checkpointLock))", Bool.self, logger: logger)
            guard leader.first == true else { return nil }
            let locked = try await PostgresChain.lock(c, logger: logger)
            let (head, seal) = (locked.head, locked.seal)
            // Never sign over entries the instances did not seal.
            try await PostgresChain.checkSeal(c, policy: policy, head: head, seal: seal, logger: logger)
            let latest = try await PostgresChain.latestCheckpoint(c, logger: logger)?.sequence ?? 0
            guard head.sequence > 0, head.sequence > latest else { return nil }
            let checkpoint = try policy.signer.checkpoint(sequence: head.sequence, entryHash: head.hex, time: Int64(now.timeIntervalSince1970))
            try await PostgresChain.insert(c, checkpoint, logger: logger)
            return checkpoint
        }
    }

    /// Throws ``LedgerIntegrityError`` when the chain does not end where the shared key sealed it.
    public func sealIntact() async throws {
        guard let policy = checkpoints else { return }
        let logger = backend.logger
        try await backend.read { c in
            let (head, seal) = try await PostgresChain.headAndSeal(c, logger: logger)
            try await PostgresChain.checkSeal(c, policy: policy, head: head, seal: seal, logger: logger)
        }
    }

    /// Checks the seal before the instance starts appending; a chain copied without a seal whose
    /// head a checkpoint of this key covers is sealed now.
    public func checkSeal(now: Date) async throws {
        guard let policy = checkpoints else { return }
        let logger = backend.logger
        try await backend.transaction { c in
            let locked = try await PostgresChain.lock(c, logger: logger)
            let (head, seal) = (locked.head, locked.seal)
            try await PostgresChain.checkSeal(c, policy: policy, head: head, seal: seal, logger: logger)
            if seal == nil { try await PostgresChain.writeSeal(c, policy: policy, head: head, now: now, logger: logger) }
        }
    }

    /// Rows of the chained tables that no event chains (inserted behind the servers' backs), oldest first.
    public func unchainedRows(limit: Int = 10) async throws -> [(kind: LedgerEventKind, row: Int64)] {
        try await backend.read { c in try await Self.unchainedRows(c, limit: limit, logger: backend.logger) }
    }

    /// Append-only triggers or replay-rule unique indexes that are missing, disabled or altered.
    public func schemaProblems() async throws -> [String] {
        try await backend.read { c in try await Self.schemaProblems(c, logger: backend.logger) }
    }

    static func events(_ c: PostgresConnection, after: Int64, limit: Int, logger: Logger) async throws -> [StoredEvent] {
        var events = try await c.rows(
            "SELECT sequence, kind, row_sequence, entry_hash FROM ledger_events WHERE sequence > \(after) ORDER BY sequence LIMIT \(max(0, limit))",
            logger: logger
        ) { row -> StoredEvent in
            let kind = try row.value("kind", String.self)
            guard let known = LedgerEventKind(rawValue: kind) else {
                throw PostgresStoreError.invalidValue(column: "ledger_events.kind", value: kind)
            }
            return StoredEvent(
                sequence: try row.value("sequence"), kind: known, row: try row.value("row_sequence"), entryHash: try row.value("entry_hash"),
                entry: nil)
        }
        let wanted = Dictionary(grouping: events, by: \.kind).mapValues { $0.map(\.row) }
        func fetch<T>(_ kind: LedgerEventKind, _ table: String, _ columns: String, _ make: (PostgresRandomAccessRow) throws -> T, _ seq: (T) -> Int64)
            async throws -> [Int64: T]
        {
            guard let rows = wanted[kind], !rows.isEmpty else { return [:] }
            let found = try await c.rows(
                "SELECT \(unescaped: columns) FROM \(unescaped: table) WHERE sequence = ANY(\(rows)::bigint[])", logger: logger, make)
            return Dictionary(found.map { (seq($0), $0) }, uniquingKeysWith: { first, _ in first })
        }
        let redemptions = try await fetch(.redemption, "redemptions", Redemption.columns, Redemption.init(row:), \.sequence)
        let attempts = try await fetch(.attempt, "attempts", RejectedAttempt.columns, RejectedAttempt.init(row:), \.sequence)
        let revocations = try await fetch(.revocation, "revocations", Revocation.columns, Revocation.init(row:), \.sequence)
        let actions = try await fetch(.adminAction, "admin_actions", AdminAction.columns, AdminAction.init(row:), \.sequence)
        let purchaseEvents = try await fetch(.purchaseEvent, "purchase_events", PurchaseEvent.columns, PurchaseEvent.init(row:), \.sequence)
        for i in events.indices {
            let (sequence, row) = (events[i].sequence, events[i].row)
            events[i].entry =
                switch events[i].kind {
                case .redemption: redemptions[row].map { .redemption($0, sequence: sequence) }
                case .attempt: attempts[row].map { .attempt($0, sequence: sequence) }
                case .revocation: revocations[row].map { .revocation($0, sequence: sequence) }
                case .adminAction: actions[row].map { .adminAction($0, sequence: sequence) }
                case .purchaseEvent: purchaseEvents[row].map { .purchaseEvent($0, sequence: sequence) }
                }
        }
        return events
    }

    static func unchainedRows(_ c: PostgresConnection, limit: Int, logger: Logger) async throws -> [(kind: LedgerEventKind, row: Int64)] {
        let tables: [(LedgerEventKind, String)] = [
            (.redemption, "redemptions"), (.attempt, "attempts"), (.revocation, "revocations"), (.adminAction, "admin_actions"),
            (.purchaseEvent, "purchase_events"),
        ]
        var found: [(kind: LedgerEventKind, row: Int64)] = []
        for (kind, table) in tables where found.count < limit {
            let rows = try await c.column(
                """
                SELECT t.sequence FROM \(unescaped: table) t
                WHERE NOT EXISTS (SELECT 1 FROM ledger_events e WHERE e.sequence > 0 AND e.kind = \(kind.rawValue) AND e.row_sequence = t.sequence)
                ORDER BY t.sequence LIMIT \(limit - found.count)
                """, Int64.self, logger: logger)
            found += rows.map { (kind: kind, row: $0) }
        }
        return found
    }

    /// The append-only triggers as migration 0001 makes them: on the table Coffer's queries
    /// name (`to_regclass`), BEFORE UPDATE OR DELETE FOR EACH ROW (tgtype 1 + 2 + 8 + 16) and
    /// BEFORE TRUNCATE (2 + 32), with no WHEN condition, column list or arguments, firing in
    /// ordinary sessions (`tgenabled` O or A: `ENABLE REPLICA TRIGGER` leaves one that never
    /// fires there), calling `coffer_append_only()` as 0001 wrote it. The replay rule's unique
    /// indexes as the migrations define them (`pg_get_indexdef`, without the schema and storage
    /// parameters, which a DBA may tune): a unique index of that name on other columns is no rule.
    static let appendOnlyTriggerTypes = (row: 27, truncate: 34)
    static let appendOnlySource = "BEGIN\n    RAISE EXCEPTION 'the ledger is append-only (% on %)', TG_OP, TG_TABLE_NAME;\nEND"
    /// The body of `coffer_api_keys_guard` as migration 0007 creates it.
    static let apiKeysGuardSource: String = {
        let sql = PostgresMigrations.all.first { $0.name == "0007_signed_api_keys" }?.sql ?? ""
        guard let start = sql.range(of: "CREATE FUNCTION coffer_api_keys_guard()"),
            let open = sql.range(of: "$$", range: start.upperBound..<sql.endIndex),
            let close = sql.range(of: "$$", range: open.upperBound..<sql.endIndex)
        else { return "" }
        return String(sql[open.upperBound..<close.lowerBound]).trimmingCharacters(in: .whitespacesAndNewlines)
    }()
    static let replayIndexes = [
        "redemptions_replay": "CREATE UNIQUE INDEX redemptions_replay ON redemptions USING btree (environment, COALESCE(replay_key, transaction_id))",
        "revocations_key":
            "CREATE UNIQUE INDEX revocations_key ON revocations USING btree (COALESCE(environment, ''::text), COALESCE(replay_key, transaction_id))",
        "purchase_events_notification":
            "CREATE UNIQUE INDEX purchase_events_notification ON purchase_events USING btree (reference) WHERE (source = 'notification'::text)",
    ]

    static func schemaProblems(_ c: PostgresConnection, logger: Logger) async throws -> [String] {
        let triggers = try await c.rows(
            """
            SELECT t.tgname::text AS name, r.relname::text AS "table", t.tgtype::int AS type, t.tgenabled::text AS enabled,
              coalesce(r.oid = to_regclass(quote_ident(r.relname)), false) AND t.tgqual IS NULL AND t.tgnargs = 0
                AND coalesce(array_length(t.tgattr::int2[], 1), 0) = 0 AS plain,
              t.tgfoid::regproc::text AS function
            FROM pg_trigger t JOIN pg_class r ON r.oid = t.tgrelid
            WHERE NOT t.tgisinternal AND t.tgfoid IN ('coffer_append_only'::regproc, to_regproc('coffer_api_keys_guard'))
            """, logger: logger
        ) { row in
            (
                name: try row.value("name", String.self), table: try row.value("table", String.self), type: Int(try row.value("type", Int32.self)),
                enabled: try row.value("enabled", String.self), plain: try row.value("plain", Bool.self),
                function: try row.value("function", String.self)
            )
        }
        var problems: [String] = []
        var expected: [(trigger: String, table: String, type: Int, function: String)] = []
        for table in ["redemptions", "attempts", "revocations", "ledger_events", "ledger_checkpoints", "admin_actions", "purchase_events"] {
            expected.append(("\(table)_append_only", table, Self.appendOnlyTriggerTypes.row, "coffer_append_only"))
            expected.append(("\(table)_no_truncate", table, Self.appendOnlyTriggerTypes.truncate, "coffer_append_only"))
        }
        // API keys (migration 0007): changed only by being revoked or signed once, never deleted.
        // Without the guard, whoever holds the owner role clears a revoked key's revocation and
        // the key works again (the key's signature does not cover it).
        expected.append(("api_keys_guard", "api_keys", Self.appendOnlyTriggerTypes.row, "coffer_api_keys_guard"))
        expected.append(("api_keys_no_truncate", "api_keys", Self.appendOnlyTriggerTypes.truncate, "coffer_append_only"))
        for rule in expected
        where !triggers.contains(where: {
            $0.name == rule.trigger && $0.table == rule.table && $0.type == rule.type && $0.function == rule.function && $0.plain
                && ["O", "A"].contains($0.enabled)
        }) {
            problems.append("trigger \(rule.trigger) is missing, disabled or altered")
        }
        let sources = try await c.rows(
            "SELECT proname::text AS name, prosrc FROM pg_proc WHERE oid IN ('coffer_append_only'::regproc, to_regproc('coffer_api_keys_guard'))",
            logger: logger
        ) { row in (name: try row.value("name", String.self), source: try row.value("prosrc", String.self)) }
        func source(_ name: String) -> String? {
            sources.first(where: { $0.name == name })?.source.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        if source("coffer_append_only") != Self.appendOnlySource {
            problems.append("function coffer_append_only was altered")
        }
        if source("coffer_api_keys_guard") != Self.apiKeysGuardSource {
            problems.append("function coffer_api_keys_guard is missing or was altered")
        }
        let indexes = try await c.rows(
            """
            SELECT c.relname::text AS name,
              regexp_replace(replace(pg_get_indexdef(i.indexrelid), ' ON ' || quote_ident(n.nspname) || '.', ' ON '), ' WITH \\([^)]*\\)', '') AS definition
            FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE i.indisunique AND i.indisvalid AND i.indrelid = to_regclass(quote_ident(
              CASE c.relname WHEN 'redemptions_replay' THEN 'redemptions' WHEN 'revocations_key' THEN 'revocations' ELSE 'purchase_events' END))
              AND c.relname = ANY(\(Array(Self.replayIndexes.keys))::text[])
            """, logger: logger
        ) { row in (name: try row.value("name", String.self), definition: try row.value("definition", String.self)) }
        for (index, definition) in Self.replayIndexes.sorted(by: { $0.key < $1.key })
        where !indexes.contains(where: { $0.name == index && $0.definition == definition }) {
            problems.append("unique index \(index) is missing, not unique or altered")
        }
        // The catalogue must be read as stored: a view, a rule or row-level security in a
        // table's place could show an audit (REPEATABLE READ) one thing and the server another.
        let catalogue = try await c.rows(
            """
            SELECT t.name, coalesce(c.relkind::text, '') AS kind, coalesce(c.relrowsecurity OR c.relforcerowsecurity, false) AS secured,
              (SELECT count(*) FROM pg_rewrite r WHERE r.ev_class = c.oid) AS rules
            FROM unnest(ARRAY['products', 'assets']) AS t(name) LEFT JOIN pg_class c ON c.oid = to_regclass(quote_ident(t.name))
            """, logger: logger
        ) { row in
            (
                name: try row.value("name", String.self), kind: try row.value("kind", String.self), secured: try row.value("secured", Bool.self),
                rules: try row.value("rules", Int64.self)
            )
        }
        for table in catalogue where table.kind != "r" || table.secured || table.rules > 0 {
            problems.append("\(table.name) is not a plain table (a view, a rule or row-level security)")
        }
        return problems
    }
}

// MARK: - Audit

extension PostgresLedger {
    /// Verifies the stored ledger against `publicKey` (nil: the chain only) and the auditor's
    /// `pinned` checkpoints, in one REPEATABLE READ transaction (a consistent snapshot while the
    /// instances append), 1000 events at a time. The seal counts as a checkpoint of the head;
    /// entries after it, or after the last checkpoint when it is gone, are `unsealed`
    /// (``LedgerAudit/checkSeal(_:last:)``).
    public func audit(publicKey: Curve25519.Signing.PublicKey?, pinned: [LedgerCheckpoint] = []) async throws -> LedgerAuditReport {
        let logger = backend.logger
        return try await backend.transaction(isolation: "REPEATABLE READ READ ONLY") { c in
            var checkpoints: [LedgerCheckpoint] = []
            while true {
                let page = try await PostgresChain.checkpoints(c, after: checkpoints.last?.sequence ?? 0, limit: 1000, logger: logger)
                checkpoints += page
                if page.count < 1000 { break }
            }
            let seal = try await PostgresChain.sealedHead(c, logger: logger)
            var audit = LedgerAudit(checkpoints: checkpoints + (seal.map { [$0] } ?? []), publicKey: publicKey, pinned: pinned)
            var last: Int64 = 0
            while true {
                let page = try await Self.events(c, after: last, limit: 1000, logger: logger)
                for event in page {
                    if event.entry == nil {
                        audit.fail(
                            .rowMismatch, event.sequence, "entry \(event.sequence) chains \(event.kind.rawValue) row \(event.row), which is gone")
                    }
                    audit.add(event.chainedEntry)
                }
                guard let end = page.last else { break }
                last = end.sequence
            }
            audit.checkSeal(seal, last: last)
            var report = audit.finish()
            if report.problem == nil { report.problem = try await Self.tableProblems(c, logger: logger).first }
            report.include(catalogue: try await Self.catalogueFindings(c, &audit.catalogue, logger: logger))
            return report
        }
    }

    /// Checks every product and asset version against the admin log's catalogue entries.
    static func catalogueFindings(_ c: PostgresConnection, _ catalogue: inout CatalogueAudit, logger: Logger) async throws -> [CatalogueFinding] {
        let products = try await c.rows("SELECT * FROM products ORDER BY product_id", logger: logger) { row in
            (id: try row.value("product_id", String.self), product: try? PostgresCatalogue.product(row))
        }
        for row in products { catalogue.product(id: row.id, row.product) }
        for asset in try await c.rows("SELECT * FROM assets ORDER BY asset_id, version", logger: logger, PostgresCatalogue.asset) {
            catalogue.version(asset)
        }
        return catalogue.finish()
    }

    /// What only the tables show: an event numbered below the chain's first (its CHECK is the
    /// owner's to drop; the walk from 1 never reads it, and the rules ignore it), a row the
    /// chain does not hold, two redemptions of one purchase, the schema's guarantees altered.
    static func tableProblems(_ c: PostgresConnection, logger: Logger) async throws -> [LedgerProblem] {
        var problems: [LedgerProblem] = []
        let below = try await c.rows(
            "SELECT sequence, kind, row_sequence FROM ledger_events WHERE sequence < 1 ORDER BY sequence LIMIT 1", logger: logger
        ) { row in (try row.value("sequence", Int64.self), try row.value("kind", String.self), try row.value("row_sequence", Int64.self)) }
        if let (sequence, kind, row) = below.first {
            problems.append(
                LedgerProblem(
                    .sequenceBroken, sequence: nil,
                    "an event numbered \(sequence) (below the chain's first) chains \(LedgerText.escaped(kind, maxBytes: 64)) row \(row): inserted behind the server's back"
                ))
        }
        if let stray = try await unchainedRows(c, limit: 1, logger: logger).first {
            problems.append(
                LedgerProblem(
                    .rowMismatch, sequence: nil,
                    "\(stray.kind.rawValue) row \(stray.row) is in the database but not in the chain (inserted behind the server's back)"))
        }
        let twice = try await c.rows(
            """
            SELECT environment, coalesce(replay_key, transaction_id) AS k, count(*) AS n FROM redemptions
            GROUP BY environment, coalesce(replay_key, transaction_id) HAVING count(*) > 1 LIMIT 1
            """, logger: logger
        ) { row in (try row.value("environment", String.self), try row.value("k", String.self), try row.value("n", Int64.self)) }
        if let (environment, key, count) = twice.first {
            problems.append(LedgerProblem(.replayBroken, sequence: nil, "\(count) redemptions of one purchase (\(environment), \(key))"))
        }
        if let problem = try await schemaProblems(c, logger: logger).first {
            problems.append(LedgerProblem(.schemaAltered, sequence: nil, "\(problem): the ledger's guarantees no longer hold in this database"))
        }
        return problems
    }
}

// MARK: - Adoption of the catalogue

extension PostgresLedger {
    /// `coffer ledger adopt --database`: logs what the admin log lacks to back the catalogue
    /// as it stands (``CatalogueLog/adoption(of:by:)``), then a `ledger.adopt` entry counting
    /// it, by `actor` — in one transaction under the chain's lock (every admin change takes it
    /// before it commits, so none lands between the read and the entries), chained and sealed.
    /// Returns the rows found and the adoption's entry. Rows outside the chain are not chained
    /// here: a PostgreSQL ledger is chained from its first row (or copied whole).
    public func adoptCatalogue(by actor: AdminAction) async throws -> (catalogue: [CatalogueFinding], action: AdminAction) {
        let logger = backend.logger
        return try await backend.transaction { [checkpoints] c in
            try await PostgresChain.sealed(c, policy: checkpoints, logger: logger) { locked in
                var catalogue = CatalogueAudit()
                var after: Int64 = 0
                while true {
                    // In chain order, as `verify` replays it (a copied ledger's rows may differ).
                    let page = try await c.rows(
                        """
                        SELECT e.sequence AS chained, a.*
                        FROM ledger_events e JOIN admin_actions a ON a.sequence = e.row_sequence
                        WHERE e.kind = 'adminAction' AND e.sequence > \(after) ORDER BY e.sequence LIMIT 1000
                        """,
                        logger: logger
                    ) { row in (chained: try row.value("chained", Int64.self), action: try AdminAction(row: row)) }
                    for (_, action) in page { catalogue.add(.adminAction(action, sequence: action.sequence)) }
                    guard let last = page.last else { break }
                    after = last.chained
                }
                let findings = try await Self.catalogueFindings(c, &catalogue, logger: logger)
                var summary = actor
                summary.action = AdminActionName.ledgerAdopt.rawValue
                summary.target = "ledger"
                let counted = CatalogueLog.adoptionSummary(findings)
                summary.detail = counted.isEmpty ? "nothing to vouch for in the catalogue" : counted
                var rows: [AdminAction] = []
                for action in CatalogueLog.adoption(of: findings, by: actor) + [summary] {
                    rows.append(try await PostgresChain.insertRow(c, AdminAction.escapedForLedger(action), logger: logger))
                }
                try await PostgresChain.append(
                    c, policy: checkpoints, head: locked.head, now: actor.at, entries: rows.map { row in { .adminAction(row, sequence: $0) } },
                    logger: logger)
                guard let adoption = rows.last else { throw PostgresStoreError.invalidValue(column: "admin_actions", value: "no adoption stored") }
                return (findings, adoption)
            }
        }
    }
}
