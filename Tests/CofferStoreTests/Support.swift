import CofferCore
import CofferTestSupport
import Foundation

@testable import CofferStore

/// A freshly migrated database in a temporary directory, removed after `body`.
func withDatabase<T>(_ body: (CofferDatabase) async throws -> T) async throws -> T {
    try await withTemporaryDirectory { dir in
        let db = try CofferDatabase(path: dir.appendingPathComponent("coffer.sqlite").path)
        return try await body(db)
    }
}

/// Lists every regular file below `url` (relative paths), sorted.
func filesBelow(_ url: URL) -> [String] {
    guard let enumerator = FileManager.default.enumerator(atPath: url.path) else { return [] }
    var files: [String] = []
    while let relative = enumerator.nextObject() as? String {
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: url.appendingPathComponent(relative).path, isDirectory: &isDirectory), !isDirectory.boolValue {
            files.append(relative)
        }
    }
    return files.sorted()
}
