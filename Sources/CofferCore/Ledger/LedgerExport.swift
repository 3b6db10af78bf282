import Crypto
import Foundation

/// The offline ledger export: NDJSON, one JSON object per line.
///
///     {"format":"coffer-ledger-export-v1","keyId":"…","publicKey":"<base64 raw Ed25519>","exportedAt":"…"}
///     {"sequence":1,"kind":"redemption","row":1,"fields":{"redemptionId":"…",…},"entryHash":"<hex>"}
///     …
///     {"checkpoint":{"sequence":1000,"entryHash":"…","time":…,"keyId":"…","signature":"…"}}
///
/// Field values are the canonical strings of ``LedgerEntry`` (dates in microseconds), null
/// when absent, so the hashes can be recomputed from the file alone.
public enum LedgerExport {
    public static let format = "coffer-ledger-export-v1"

    struct Line: Codable {
        var format: String?
        var keyId: String?
        var publicKey: String?
        var exportedAt: String?
        var sequence: Int64?
        var kind: String?
        var row: Int64?
        var fields: [String: String?]?
        var entryHash: String?
        var checkpoint: LedgerCheckpoint?
    }

    /// The keys of a header, a checkpoint and an entry line: a line carries one set's keys and
    /// no others, and only the first may be a header. (A header's or checkpoint's keys on an
    /// entry line would make verification skip a line that other readers of the file — `jq`,
    /// an importer — take for an entry.)
    static let lineKeys: [(kind: String, keys: Set<String>)] = [
        ("header", ["format", "keyId", "publicKey", "exportedAt"]), ("checkpoint", ["checkpoint"]),
        ("entry", ["sequence", "kind", "row", "fields", "entryHash"]),
    ]

    /// A line and the names of its members, from one parse.
    struct ParsedLine: Decodable {
        let line: Line
        let names: Set<String>

        struct Name: CodingKey {
            let stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }

        init(from decoder: any Decoder) throws {
            line = try Line(from: decoder)
            names = Set(try decoder.container(keyedBy: Name.self).allKeys.map(\.stringValue))
        }
    }

    /// What is wrong with line `number` whose members are `names`, if anything.
    static func shapeProblem(_ names: Set<String>, number: Int) -> String? {
        // The kind whose keys it carries most of.
        guard let kind = lineKeys.max(by: { names.intersection($0.keys).count < names.intersection($1.keys).count }),
            !names.isDisjoint(with: kind.keys)
        else {
            return "line \(number) is not a ledger export line"
        }
        if !names.isSubset(of: kind.keys) {
            let others = names.subtracting(kind.keys).sorted().map { LedgerText.escaped($0, maxBytes: 64) }
            return "line \(number) is a\(kind.kind == "entry" ? "n" : "") \(kind.kind) line with other keys too (\(others.joined(separator: ", ")))"
        }
        if kind.kind == "header", number != 1 { return "line \(number) is a second header: only the first line may be one" }
        return nil
    }

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    public static func headerLine(publicKey: Curve25519.Signing.PublicKey?, exportedAt: Date) throws -> String {
        try line(
            Line(
                format: format, keyId: publicKey.map(LedgerSigner.keyId), publicKey: publicKey.map { $0.rawRepresentation.base64EncodedString() },
                exportedAt: RFC3339.format(exportedAt)))
    }

    public static func entryLine(_ chained: ChainedEntry) throws -> String {
        try line(
            Line(
                sequence: chained.entry.sequence, kind: chained.entry.kind.rawValue, row: chained.entry.row, fields: chained.entry.fields,
                entryHash: chained.entryHash))
    }

    public static func checkpointLine(_ checkpoint: LedgerCheckpoint) throws -> String { try line(Line(checkpoint: checkpoint)) }

    static func line(_ value: Line) throws -> String { String(decoding: try encoder.encode(value), as: UTF8.self) + "\n" }

    /// Verifies an export. `publicKey` is the key the auditor trusts (from
    /// `GET /v1/audit/public-key` or `coffer ledger public-key`, kept apart from the data);
    /// nil falls back to the key written in the file, which proves only self-consistency.
    public static func verify(_ data: Data, publicKey: Curve25519.Signing.PublicKey?, pinned: [LedgerCheckpoint] = []) -> LedgerAuditReport {
        var lines: [(Int, Line)] = []
        var unreadable: LedgerProblem?
        var number = 0
        for raw in data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true) {
            number += 1
            guard let parsed = try? JSONDecoder().decode(ParsedLine.self, from: Data(raw)) else {
                if unreadable == nil { unreadable = LedgerProblem(.unreadable, sequence: nil, "line \(number) is not a ledger export line") }
                continue
            }
            if let problem = shapeProblem(parsed.names, number: number) {
                if unreadable == nil { unreadable = LedgerProblem(.unreadable, sequence: nil, problem) }
                continue
            }
            lines.append((number, parsed.line))
        }
        var key = publicKey
        if let header = lines.first?.1, header.format != nil {
            if header.format != format, unreadable == nil {
                unreadable = LedgerProblem(
                    .unreadable, sequence: nil, "unknown export format \(LedgerText.escaped(header.format ?? "", maxBytes: 64))")
            }
            if key == nil, let raw = header.publicKey.flatMap(Base64.decode) { key = try? Curve25519.Signing.PublicKey(rawRepresentation: raw) }
        }
        var audit = LedgerAudit(checkpoints: lines.compactMap(\.1.checkpoint), publicKey: key, pinned: pinned)
        if let unreadable { audit.fail(unreadable.kind, unreadable.sequence, unreadable.detail) }
        for (number, line) in lines where line.checkpoint == nil && line.format == nil {
            guard let sequence = line.sequence, let kindName = line.kind, let kind = LedgerEventKind(rawValue: kindName), let row = line.row,
                let fields = line.fields, let hash = line.entryHash
            else {
                audit.fail(.unreadable, line.sequence, "line \(number) lacks sequence, kind, row, fields or entryHash")
                continue
            }
            let names = LedgerEntry.fieldNames(for: kind)
            let required = Set(names.prefix(LedgerEntry.coreFieldCount(for: kind)))
            if !required.isSubset(of: fields.keys) || !Set(fields.keys).isSubset(of: names) {
                audit.fail(.unreadable, sequence, "line \(number): the fields of a \(kind.rawValue) are \(names.joined(separator: ", "))")
            }
            let values = names.map { fields[$0] ?? nil }
            audit.add(ChainedEntry(entry: LedgerEntry(sequence: sequence, kind: kind, row: row, values: values), entryHash: hash))
        }
        audit.checkExportEnd()
        return audit.finish()
    }
}
