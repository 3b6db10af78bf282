import CofferCore
import Foundation

/// Content pins in memory, as the SQLite and PostgreSQL tables keep them: appended, the
/// newest of an object counting.
public actor InMemoryContentPins: ContentPinRepository {
    private var tags: [String: [String: [String]]] = [:]

    public init() {}

    public func pinnedTag(location: String, sha256: String) -> String? { tags[location]?[sha256]?.last }

    public func pin(location: String, sha256: String, tag: String, at: Date) {
        tags[location, default: [:]][sha256, default: []].append(tag)
    }

    /// Every tag pinned for the object, oldest first.
    public func history(location: String, sha256: String) -> [String] { tags[location]?[sha256] ?? [] }
}
