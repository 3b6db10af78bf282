import CofferCore
import Foundation

/// Content pins in memory, as the SQLite and PostgreSQL tables keep them (one tag per store
/// and digest, the last one recorded).
public actor InMemoryContentPins: ContentPinRepository {
    private var tags: [String: [String: String]] = [:]

    public init() {}

    public func pinnedTag(location: String, sha256: String) -> String? { tags[location]?[sha256] }

    public func pin(location: String, sha256: String, tag: String, at: Date) {
        tags[location, default: [:]][sha256] = tag
    }
}
