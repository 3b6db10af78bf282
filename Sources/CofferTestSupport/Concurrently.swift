/// Runs `body(0)`, `body(1)`, … `body(count - 1)` as concurrent child tasks and returns
/// their results in completion order; the first error cancels the rest and is rethrown.
///
///     let outcomes = try await concurrently(64) { index in try await ledger.insert(redemption(index)) }
public func concurrently<T: Sendable>(_ count: Int, _ body: @escaping @Sendable (Int) async throws -> T) async throws -> [T] {
    try await withThrowingTaskGroup(of: T.self) { group in
        for index in 0..<count { group.addTask { try await body(index) } }
        var results: [T] = []
        results.reserveCapacity(count)
        for try await result in group { results.append(result) }
        return results
    }
}
