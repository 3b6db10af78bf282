import Foundation

/// A single `bytes=` range (RFC 9110 §14.1.2). Several ranges are answered with the whole file.
enum ByteRange: Equatable {
    case ignore
    case unsatisfiable
    case range(ClosedRange<Int64>)

    static func parse(_ header: String, size: Int64) -> ByteRange {
        guard header.hasPrefix("bytes="), header.utf8.count <= 200 else { return .ignore }
        let spec = header.dropFirst(6).trimmingCharacters(in: .whitespaces)
        guard !spec.contains(",") else { return .ignore }
        let parts = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return .ignore }
        let first = parts[0].trimmingCharacters(in: .whitespaces)
        let last = parts[1].trimmingCharacters(in: .whitespaces)
        if first.isEmpty {
            guard let suffix = Int64(last), suffix >= 0 else { return .ignore }
            guard suffix > 0, size > 0 else { return .unsatisfiable }
            return .range(max(0, size - suffix)...(size - 1))
        }
        guard let start = Int64(first), start >= 0 else { return .ignore }
        guard start < size else { return .unsatisfiable }
        if last.isEmpty { return .range(start...(size - 1)) }
        guard let end = Int64(last), end >= start else { return .ignore }
        return .range(start...min(end, size - 1))
    }
}
