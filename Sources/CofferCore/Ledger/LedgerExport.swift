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
            guard let line = try? JSONDecoder().decode(Line.self, from: Data(raw)) else {
                if unreadable == nil { unreadable = LedgerProblem(.unreadable, sequence: nil, "line \(number) is not a ledger export line") }
                continue
            }
            lines.append((number, line))
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
        return audit.finish()
    }
}
