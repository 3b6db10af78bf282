import CofferCore
import CofferStore

/// Why the server refused to open a data directory's ledger.
public enum LedgerStartupError: Error, CustomStringConvertible {
    /// Rows no ledger event chains (first few named).
    case unchainedRows([(kind: LedgerEventKind, row: Int64)])
    /// The chain does not end where this server's key sealed it.
    case sealBroken(LedgerIntegrityError)
    /// Append-only triggers or replay-rule unique indexes missing or altered.
    case schemaAltered([String])

    public var description: String {
        switch self {
        case .unchainedRows(let rows):
            let named = rows.map { "\($0.kind.rawValue) row \($0.row)" }.joined(separator: ", ")
            return """
                the ledger holds rows outside its hash chain (\(named)\(rows.count >= 10 ? ", …" : "")): they were inserted behind the \
                server's back, or come from a Coffer older than the chain (or, for adminAction rows, older than migration 0003). \
                The server will not chain rows it did not write. Check with `coffer ledger verify`; if you vouch for them, \
                chain them on purpose with `coffer ledger adopt --data-dir DIR` (recorded as a chained admin action).
                """
        case .sealBroken(let error):
            return """
                \(error). The server will not extend or sign a chain it did not seal: treat this as tampering until \
                shown otherwise. Check with `coffer ledger verify --public-key … --checkpoint …` (your saved \
                checkpoints). Only if you vouch for every entry as it stands, `coffer ledger adopt --reseal` seals it \
                and records the old seal and the re-sealed range in the chain, where auditors see it.
                """
        case .schemaAltered(let problems):
            return """
                the ledger's schema was altered (\(problems.joined(separator: "; "))): the append-only and replay \
                guarantees do not hold in this database. Restore it from a backup and check it with `coffer ledger verify`.
                """
        }
    }
}
