extension String {
    /// Equality as SQL databases compare text (byte for byte), not as Swift compares strings
    /// (canonical equivalence: "é" and "e\u{301}" are equal Strings but different ids).
    func sameBytes(_ other: String) -> Bool { utf8.elementsEqual(other.utf8) }
}
