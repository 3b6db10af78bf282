/// What may be written into the ledger, and how text that comes from outside is made safe
/// to store.
///
/// SQLite and most tools that read its files treat U+0000 as the end of a string, so a value
/// with a NUL would be hashed whole but read back cut short — one request could make the
/// chain unverifiable. Two rules keep what is hashed identical to what is stored and read:
/// - **Identifiers** (transaction, product and bundle ids, app account tokens) are checked
///   with ``isIdentifier(_:)``: a value that fails is refused before anything is written.
/// - **Free text and claimed values** (a refusal's detail, identifiers taken from a proof that
///   did not verify, an admin's reason) go through ``escaped(_:maxBytes:)``: every control
///   character becomes a visible `\u{…}` escape and the value is cut to a byte budget, so it
///   is stored escaped and hashed as stored.
public enum LedgerText {
    /// The longest identifier Coffer stores, in UTF-8 bytes. Apple's transaction ids are
    /// decimal strings of ≤ 20 digits; product and bundle ids are reverse-DNS strings.
    public static let maxIdentifierBytes = 128

    /// True for a control character (C0, DEL, C1), a line or paragraph separator, the
    /// replacement character (what a decoder makes of bytes that were not UTF-8), a
    /// bidirectional control (U+061C, U+200E/F, U+202A–202E, U+2066–2069: they make an
    /// auditor's screen show text in another order — a claimed id displayed as another
    /// customer's) or an invisible character (U+180E, U+200B, U+2060–2064, U+206A–206F,
    /// U+FEFF, U+FFF9–FFFB). Joiners (U+200C/D) and tag characters stay: emoji and several
    /// scripts need them, and they do not reorder text.
    public static func isUnsafe(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F, 0x2028, 0x2029, 0xFFFD: true
        case 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: true
        case 0x180E, 0x200B, 0x2060...0x2064, 0x206A...0x206F, 0xFEFF, 0xFFF9...0xFFFB: true
        default: false
        }
    }

    /// Whether `value` may be stored as an identifier: 1–``maxIdentifierBytes`` UTF-8 bytes,
    /// none of the unsafe characters above (controls, separators, U+FFFD, bidirectional
    /// controls, invisible characters).
    public static func isIdentifier(_ value: String) -> Bool {
        let count = value.utf8.count
        guard count >= 1, count <= maxIdentifierBytes else { return false }
        return !value.unicodeScalars.contains(where: isUnsafe)
    }

    /// `value` with every unsafe scalar replaced by `\u{XXXX}` and cut (on a scalar boundary)
    /// to at most `maxBytes` UTF-8 bytes, a cut marked with a trailing `…`. Idempotent.
    public static func escaped(_ value: String, maxBytes: Int) -> String {
        if value.utf8.count <= maxBytes && !value.unicodeScalars.contains(where: isUnsafe) { return value }
        var full = String.UnicodeScalarView()
        for scalar in value.unicodeScalars {
            if isUnsafe(scalar) {
                full.append(contentsOf: "\\u{\(String(scalar.value, radix: 16, uppercase: true))}".unicodeScalars)
            } else {
                full.append(scalar)
            }
        }
        if String(full).utf8.count <= maxBytes { return String(full) }
        let ellipsis: Unicode.Scalar = "…"
        let budget = max(0, maxBytes - ellipsis.utf8.count)
        var out = String.UnicodeScalarView()
        var bytes = 0
        for scalar in full {
            let size = scalar.utf8.count
            if bytes + size > budget { break }
            out.append(scalar)
            bytes += size
        }
        out.append(ellipsis)
        return String(out)
    }

    /// ``escaped(_:maxBytes:)`` for an optional claimed identifier.
    public static func claimed(_ value: String?) -> String? {
        value.map { escaped($0, maxBytes: maxIdentifierBytes) }
    }

    /// The byte budget of a refusal's `detail`.
    public static let maxDetailBytes = 512
}

extension AdminAction {
    /// The action as every admin log stores it: each text field escaped and capped
    /// (``LedgerText/escaped(_:maxBytes:)``), so no control character or oversized value reaches the chain.
    public static func escapedForLedger(_ a: AdminAction) -> AdminAction {
        var action = a
        action.keyName = LedgerText.escaped(a.keyName, maxBytes: 128)
        action.target = LedgerText.escaped(a.target, maxBytes: 512)
        action.detail = LedgerText.escaped(a.detail, maxBytes: 1024)
        action.action = LedgerText.escaped(a.action, maxBytes: 64)
        return action
    }
}

extension PurchaseEvent {
    /// The event as every ledger stores it: free text escaped and capped, identifiers (checked
    /// by the vault with ``LedgerText/isIdentifier(_:)``) escaped too, so a caller that skipped
    /// the check still cannot put a control character into the chain.
    public static func escapedForLedger(_ e: PurchaseEvent) -> PurchaseEvent {
        var event = e
        let id = LedgerText.maxIdentifierBytes
        event.kind = LedgerText.escaped(e.kind, maxBytes: 64)
        event.environment = LedgerText.escaped(e.environment, maxBytes: 64)
        // An auto-renewable's key is `original:productId`: two identifiers.
        event.replayKey = LedgerText.escaped(e.replayKey, maxBytes: 2 * id + 1)
        event.redemptionId = LedgerText.escaped(e.redemptionId, maxBytes: id)
        event.transactionId = LedgerText.escaped(e.transactionId, maxBytes: id)
        event.playerId = e.playerId.map { LedgerText.escaped($0, maxBytes: id) }
        event.detail = LedgerText.escaped(e.detail, maxBytes: LedgerText.maxDetailBytes)
        event.reference = LedgerText.escaped(e.reference, maxBytes: id)
        return event
    }
}
