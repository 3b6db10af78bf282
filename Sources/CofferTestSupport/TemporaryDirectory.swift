import Foundation

/// A new, empty directory under the system's temporary directory, named `prefix-<UUID>`.
/// The caller removes it (see ``withTemporaryDirectory(prefix:_:)``).
public func makeTemporaryDirectory(prefix: String = "coffer-test") throws -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}

/// Runs `body` with a new temporary directory and removes the directory afterwards.
public func withTemporaryDirectory<T>(prefix: String = "coffer-test", _ body: (URL) async throws -> T) async throws -> T {
    let url = try makeTemporaryDirectory(prefix: prefix)
    defer { try? FileManager.default.removeItem(at: url) }
    return try await body(url)
}
