import Crypto
import Foundation
import X509

/// What a ledger event records.
public enum LedgerEventKind: String, Codable, Sendable, Hashable, CaseIterable {
    /// A transaction redeemed (a row of `redemptions`).
    case redemption
    /// A refused attempt (a row of `attempts`).
    case attempt
    /// A purchase refunded or revoked (a row of `revocations`).
    case revocation
    /// An admin action: upload, product change, key change, ledger adoption (a row of `admin_actions`).
    case adminAction
    /// A restore, renewal, subscription status change or refund outcome (a row of `purchase_events`).
    case purchaseEvent
}

/// One entry of the tamper-evident ledger: its position, its kind, the row it chains and
/// that row's fields as canonical strings (see ``canonicalBytes``).
///
/// `entryHash = SHA-256(previous entryHash ‖ canonicalBytes)`, with 32 zero bytes before the
/// first entry. The README specifies the canonical bytes so anyone can recompute them.
public struct LedgerEntry: Sendable, Hashable {
    public var sequence: Int64
    public var kind: LedgerEventKind
    /// The row's own `sequence` in its table (`redemptions` or `attempts`).
    public var row: Int64
    /// Field values in the kind's canonical order (``fieldNames(for:)``); nil is "absent".
    public var values: [String?]

    public init(sequence: Int64, kind: LedgerEventKind, row: Int64, values: [String?]) {
        self.sequence = sequence
        self.kind = kind
        self.row = row
        self.values = values
    }

    /// The fields each kind carries, in canonical order: the fields of
    /// ``coreFieldCount(for:)`` first, then fields added later (migration 0003), which are
    /// left out of the canonical bytes when absent so entries written before them keep
    /// their hashes.
    public static func fieldNames(for kind: LedgerEventKind) -> [String] {
        switch kind {
        case .redemption:
            [
                "redemptionId", "transactionId", "originalTransactionId", "productId", "bundleId", "environment", "purchaseDate", "quantity",
                "receiptSHA256", "sourceFormat", "redeemedAt", "clientAddress", "appAccountToken", "status", "grantHash", "replayKey", "playerId",
                "expiresAt",
            ]
        case .attempt: ["at", "code", "detail", "transactionId", "productId", "receiptSHA256", "clientAddress", "claimed"]
        case .revocation: ["redemptionId", "transactionId", "revokedAt", "reason", "source", "reference", "recordedAt", "environment", "replayKey"]
        case .adminAction: ["at", "keyId", "keyName", "action", "target", "detail", "clientAddress"]
        case .purchaseEvent:
            [
                "at", "kind", "environment", "replayKey", "redemptionId", "transactionId", "detail", "source", "reference", "playerId", "expiresAt",
                "graceUntil",
            ]
        }
    }

    /// How many of ``fieldNames(for:)`` every entry of `kind` has (absent ones are written `name~`).
    public static func coreFieldCount(for kind: LedgerEventKind) -> Int {
        switch kind {
        case .redemption: 15
        case .attempt: 7
        case .revocation: 7
        case .adminAction: 7
        case .purchaseEvent: 9
        }
    }

    /// The entry for a stored redemption (its `sequence` is the row).
    public static func redemption(_ r: Redemption, sequence: Int64) -> LedgerEntry {
        LedgerEntry(
            sequence: sequence, kind: .redemption, row: r.sequence,
            values: [
                r.redemptionId, r.transactionId, r.originalTransactionId, r.productId, r.bundleId, r.environment, r.purchaseDate.map(micros),
                String(r.quantity), r.receiptSHA256, r.sourceFormat.rawValue, micros(r.redeemedAt), r.clientAddress, r.appAccountToken, r.status,
                r.grantHash, r.replayKey, r.playerId, r.expiresAt.map(micros),
            ])
    }

    /// The entry for a stored rejected attempt (its `sequence` is the row).
    public static func attempt(_ a: RejectedAttempt, sequence: Int64) -> LedgerEntry {
        LedgerEntry(
            sequence: sequence, kind: .attempt, row: a.sequence,
            values: [
                micros(a.at), a.code, a.detail, a.transactionId, a.productId, a.receiptSHA256, a.clientAddress,
                a.claimed.map { $0 ? "true" : "false" },
            ])
    }

    /// The entry for a stored revocation (its `sequence` is the row).
    public static func revocation(_ r: Revocation, sequence: Int64) -> LedgerEntry {
        LedgerEntry(
            sequence: sequence, kind: .revocation, row: r.sequence,
            values: [
                r.redemptionId, r.transactionId, micros(r.revokedAt), r.reason, r.source.rawValue, r.reference, micros(r.recordedAt), r.environment,
                r.replayKey,
            ])
    }

    /// The entry for a stored admin action (its `sequence` is the row).
    public static func adminAction(_ a: AdminAction, sequence: Int64) -> LedgerEntry {
        LedgerEntry(
            sequence: sequence, kind: .adminAction, row: a.sequence,
            values: [micros(a.at), a.keyId, a.keyName, a.action, a.target, a.detail, a.clientAddress])
    }

    /// The entry for a stored purchase event (its `sequence` is the row).
    public static func purchaseEvent(_ e: PurchaseEvent, sequence: Int64) -> LedgerEntry {
        LedgerEntry(
            sequence: sequence, kind: .purchaseEvent, row: e.sequence,
            values: [
                micros(e.at), e.kind, e.environment, e.replayKey, e.redemptionId, e.transactionId, e.detail, e.source.rawValue, e.reference,
                e.playerId, e.expiresAt.map(micros), e.graceUntil.map(micros),
            ])
    }

    /// A date as whole microseconds since 1970-01-01T00:00:00Z, in decimal. A time no clock or
    /// signed payload gives (non-finite, or beyond ``storedDate(seconds:)``: only a row written behind
    /// the server's back holds one) is hashed as its own text — never an integer's, and
    /// never a trap.
    public static func micros(_ date: Date) -> String {
        let value = (date.timeIntervalSince1970 * 1_000_000).rounded()
        guard let whole = Int64(exactly: value) else { return "\(value)" }
        return String(whole)
    }

    /// The stored times every backend reads back: finite unix seconds under 10¹² in size
    /// (signed payloads' dates are checked to that on input, `MillisecondDate`); a stored row
    /// outside it was not written by Coffer. Within it, ``micros(_:)`` and `RFC3339.format`
    /// cannot overflow.
    public static func storedDate(seconds: Double) -> Date? {
        guard seconds.isFinite, abs(seconds) < 1e12 else { return nil }
        return Date(timeIntervalSince1970: seconds)
    }

    /// The bytes that are hashed:
    ///
    ///     coffer-ledger-v1\n
    ///     sequence=<len>:<decimal>\n  kind=<len>:<kind>\n  row=<len>:<decimal>\n
    ///     then, for each field of the kind in order: name=<len>:<value>\n, or name~\n when absent
    ///     (a field added after the kind's first version is left out entirely when absent)
    ///
    /// where `<len>` is the UTF-8 byte length of the value in decimal. Length prefixes make the
    /// encoding unambiguous whatever the values contain.
    public var canonicalBytes: [UInt8] {
        var out = Array("coffer-ledger-v1\n".utf8)
        func field(_ name: String, _ value: String?) {
            out.append(contentsOf: name.utf8)
            if let value {
                out.append(UInt8(ascii: "="))
                out.append(contentsOf: String(value.utf8.count).utf8)
                out.append(UInt8(ascii: ":"))
                out.append(contentsOf: value.utf8)
            } else {
                out.append(UInt8(ascii: "~"))
            }
            out.append(UInt8(ascii: "\n"))
        }
        field("sequence", String(sequence))
        field("kind", kind.rawValue)
        field("row", String(row))
        let core = Self.coreFieldCount(for: kind)
        for (index, (name, value)) in zip(Self.fieldNames(for: kind), values).enumerated() where index < core || value != nil {
            field(name, value)
        }
        return out
    }

    /// The fields by name (export form).
    public var fields: [String: String?] {
        Dictionary(uniqueKeysWithValues: zip(Self.fieldNames(for: kind), values).map { ($0, $1) })
    }
}

/// The hash chain arithmetic.
public enum LedgerChain {
    /// The "previous hash" of the first entry.
    public static let genesis = [UInt8](repeating: 0, count: 32)

    /// `SHA-256(previous ‖ entry.canonicalBytes)`.
    public static func hash(previous: [UInt8], entry: LedgerEntry) -> [UInt8] {
        var hasher = SHA256()
        hasher.update(data: previous)
        hasher.update(data: entry.canonicalBytes)
        return Array(hasher.finalize())
    }
}

/// A chained entry as stored or exported: the entry and the hash recorded beside it.
public struct ChainedEntry: Sendable, Hashable {
    public var entry: LedgerEntry
    /// Lower-case hex.
    public var entryHash: String

    public init(entry: LedgerEntry, entryHash: String) {
        self.entry = entry
        self.entryHash = entryHash
    }
}

/// A signed statement "the ledger's entry `sequence` has hash `entryHash`", made at `time`.
public struct LedgerCheckpoint: Codable, Sendable, Hashable {
    public var sequence: Int64
    /// Lower-case hex SHA-256.
    public var entryHash: String
    /// Unix seconds.
    public var time: Int64
    public var keyId: String
    /// Base64 Ed25519 signature over ``message``.
    public var signature: String

    public init(sequence: Int64, entryHash: String, time: Int64, keyId: String, signature: String) {
        self.sequence = sequence
        self.entryHash = entryHash
        self.time = time
        self.keyId = keyId
        self.signature = signature
    }

    /// The signed bytes: `coffer-checkpoint-v1\nsequence=<n>\nentryHash=<hex>\ntime=<unix s>\n`.
    public static func message(sequence: Int64, entryHash: String, time: Int64) -> [UInt8] {
        Array("coffer-checkpoint-v1\nsequence=\(sequence)\nentryHash=\(entryHash)\ntime=\(time)\n".utf8)
    }

    public var message: [UInt8] { Self.message(sequence: sequence, entryHash: entryHash, time: time) }

    /// Whether `key` signed this checkpoint.
    public func isSigned(by key: Curve25519.Signing.PublicKey) -> Bool {
        guard let signature = Base64.decode(signature) else { return false }
        return key.isValidSignature(signature, for: message)
    }
}

/// The server's checkpoint signing key (Ed25519).
public struct LedgerSigner: Sendable {
    public let privateKey: Curve25519.Signing.PrivateKey

    public init(privateKey: Curve25519.Signing.PrivateKey) { self.privateKey = privateKey }

    public var publicKey: Curve25519.Signing.PublicKey { privateKey.publicKey }
    public var keyId: String { Self.keyId(publicKey) }

    /// The first 8 bytes of SHA-256 of the raw public key, in hex.
    public static func keyId(_ key: Curve25519.Signing.PublicKey) -> String {
        SHA256.hash(data: key.rawRepresentation).prefix(8).hexString
    }

    public func checkpoint(sequence: Int64, entryHash: String, time: Int64) throws -> LedgerCheckpoint {
        let signature = try privateKey.signature(for: LedgerCheckpoint.message(sequence: sequence, entryHash: entryHash, time: time))
        return LedgerCheckpoint(sequence: sequence, entryHash: entryHash, time: time, keyId: keyId, signature: Data(signature).base64EncodedString())
    }
}

/// Reading and writing the checkpoint public key, as auditors receive it.
public enum LedgerKeys {
    /// SubjectPublicKeyInfo PEM ("PUBLIC KEY"), as `openssl pkey -pubin` reads it.
    public static func pem(_ key: Curve25519.Signing.PublicKey) throws -> String {
        try Certificate.PublicKey(key).serializeAsPEM().pemString
    }

    /// Accepts a PEM public key, base64 of the raw 32 bytes, or the JSON of
    /// `GET /v1/audit/public-key`.
    public static func parse(_ text: String) -> Curve25519.Signing.PublicKey? {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed.hasPrefix("-----BEGIN") {
            guard let key = try? Certificate.PublicKey(pemEncoded: trimmed) else { return nil }
            return Curve25519.Signing.PublicKey(key)
        }
        if trimmed.hasPrefix("{") {
            struct JSONKey: Decodable { var publicKey: String }
            guard let json = try? JSONDecoder().decode(JSONKey.self, from: Data(trimmed.utf8)) else { return nil }
            return parse(json.publicKey)
        }
        guard let raw = Base64.decode(trimmed), raw.count == 32 else { return nil }
        return try? Curve25519.Signing.PublicKey(rawRepresentation: raw)
    }
}

extension LedgerCheckpoint {
    /// Checkpoints an auditor saved: one checkpoint object (`/v1/audit/checkpoints/latest`), a
    /// page (`{"items":[…]}` from `/v1/audit/checkpoints`), an array, or NDJSON lines of either
    /// (including the export's `{"checkpoint":{…}}` lines). Nil when nothing in `data` is a checkpoint
    /// or a line is not one of these.
    public static func saved(_ data: Data) -> [LedgerCheckpoint]? {
        struct Page: Decodable { var items: [LedgerCheckpoint] }
        struct Wrapped: Decodable { var checkpoint: LedgerCheckpoint }
        let decoder = JSONDecoder()
        func parse(_ chunk: Data) -> [LedgerCheckpoint]? {
            if let one = try? decoder.decode(LedgerCheckpoint.self, from: chunk) { return [one] }
            if let page = try? decoder.decode(Page.self, from: chunk) { return page.items }
            if let array = try? decoder.decode([LedgerCheckpoint].self, from: chunk) { return array }
            if let wrapped = try? decoder.decode(Wrapped.self, from: chunk) { return [wrapped.checkpoint] }
            return nil
        }
        if let whole = parse(data) { return whole.isEmpty ? nil : whole }
        var out: [LedgerCheckpoint] = []
        for line in data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true) {
            let trimmed = line.drop(while: { $0 == 0x20 || $0 == 0x09 || $0 == 0x0D })
            if trimmed.isEmpty { continue }
            guard let parsed = parse(Data(trimmed)) else {
                // An export's header and entry lines carry no checkpoint: skip them.
                if (try? JSONSerialization.jsonObject(with: Data(trimmed))) is [String: Any] { continue }
                return nil
            }
            out += parsed
        }
        return out.isEmpty ? nil : out
    }
}
