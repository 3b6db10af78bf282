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
    /// The ledger ends before, or differs at, the data directory's high-water mark (the problem, the mark's path).
    case behindHighWater(String, String)
    /// The high-water mark's file is not one.
    case highWaterUnreadable(String)
    /// Products or asset versions the chained admin log does not back.
    case catalogueUnbacked([CatalogueFinding])
    /// An admin-log entry is not the one the ledger key signed.
    case adminLogBroken(SignedWindow.Failure)

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
        case .behindHighWater(let problem, let path):
            return """
                \(problem). The database was restored from an older backup, failed over to a standby that lost \
                commits, or put back behind the server's back: the purchases redeemed after that point could be \
                redeemed again, and refunds recorded after it are gone. The server will not serve from it. Check with \
                `coffer ledger verify --public-key … --checkpoint …` (your saved checkpoints); once you vouch for the \
                ledger as it stands, delete \(path) and start again.
                """
        case .highWaterUnreadable(let path):
            return "\(path) is not a ledger high-water mark: delete it (after checking the ledger with `coffer ledger verify`) and start again"
        case .catalogueUnbacked(let findings):
            let named = findings.prefix(10).map { "\($0.kind.rawValue): \($0)" }.joined(separator: "; ")
            return """
                the catalogue holds \(findings.count) row(s) the chained admin log does not back (\(named)\(findings.count > 10 ? "; …" : "")): \
                they were changed behind the server's back, or come from a Coffer older than the catalogue's log entries. The server \
                will not serve a catalogue no admin made: a changed product could hand its buyers another product's content. Check \
                with `coffer ledger verify`; put the rows back, or, if you vouch for them as they stand, log them on purpose with \
                `coffer ledger adopt` (--data-dir DIR, or --database URL).
                """
        case .adminLogBroken(let failure):
            return """
                the admin log does not verify (\(failure)): an admin-log entry was edited, re-pointed or inserted behind \
                the server's back, and the catalogue it backs cannot be trusted. The server will not serve from it. Check \
                with `coffer ledger verify` and restore the database from a backup.
                """
        case .schemaAltered(let problems):
            return """
                the ledger's schema was altered (\(problems.joined(separator: "; "))): the append-only and replay \
                guarantees do not hold in this database. Restore it from a backup and check it with `coffer ledger verify`.
                """
        }
    }
}
