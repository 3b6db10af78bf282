import Foundation

/// Runs blocking `work` (a child process, a psql session) on a thread of its own, and waits
/// for it without holding a thread of Swift's cooperative pool.
///
/// That pool has one thread per core: two on the CI machines. A test that blocks a pool thread
/// waiting for a child process that talks to this process's own server (a `coffer` command
/// against an in-process Hummingbird app), or for a lock this process's own PostgreSQL session
/// holds (psql behind the ledger writer's back), waits for tasks that need a pool thread to
/// move. Two such waits at once, in two tests running in parallel, and no task of the whole
/// run ever runs again: `swift test` hangs until CI's limit. Measured: eight tasks that each
/// block for 1 s take 4 s on this 2-core box.
///
/// Throws what `work` throws: work that cannot fail needs no `try`.
public func offThePool<T: Sendable, Failure: Error>(_ work: @escaping @Sendable () throws(Failure) -> T) async throws(Failure) -> T {
    let result: Result<T, Failure> = await withCheckedContinuation { continuation in
        Thread { continuation.resume(returning: Result { () throws(Failure) -> T in try work() }) }.start()
    }
    return try result.get()
}
