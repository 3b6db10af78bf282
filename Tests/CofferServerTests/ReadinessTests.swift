import Synchronization
import Testing

@testable import CofferServer

/// `/readyz` answers anyone: its database check runs once at a time and is shared.
@Suite struct ReadinessTests {
    @Test("callers during a check wait for it and share its value, until it is maxAge old")
    func oneCheckAtATimeSharedForItsAge() async {
        let shared = SharedOutcome<Int>()
        let checks = Mutex(0)
        let (gate, open) = AsyncStream<Void>.makeStream()
        let check: @Sendable () async -> Int = {
            let n = checks.withLock {
                $0 += 1
                return $0
            }
            for await _ in gate {}
            return n
        }
        let values = await withTaskGroup(of: Int.self) { group in
            for _ in 0..<20 { group.addTask { await shared.value(maxAge: .seconds(60), check) } }
            open.finish()
            return await group.reduce(into: [Int]()) { $0.append($1) }
        }
        #expect(values == Array(repeating: 1, count: 20), "twenty probes, one check")
        #expect(await shared.value(maxAge: .seconds(60), check) == 1)
        #expect(await shared.value(maxAge: .zero, check) == 2, "once maxAge old, checked again")
        #expect(checks.withLock { $0 } == 2)
    }

    /// A check slower than `maxAge` (a database that takes seconds to answer) is still the one
    /// check: probes arriving after `maxAge` while it runs wait for it instead of starting more.
    @Test func aCheckSlowerThanMaxAgeIsStillTheOnlyOne() async {
        let shared = SharedOutcome<Int>()
        let checks = Mutex(0)
        let (gate, open) = AsyncStream<Void>.makeStream()
        let check: @Sendable () async -> Int = {
            let n = checks.withLock {
                $0 += 1
                return $0
            }
            for await _ in gate {}
            return n
        }
        let values = await withTaskGroup(of: Int.self) { group in
            group.addTask { await shared.value(maxAge: .milliseconds(1), check) }
            // The first check has started (a condition, not a guess), and is older than maxAge.
            while checks.withLock({ $0 }) == 0 { await Task.yield() }
            try? await Task.sleep(for: .milliseconds(20))
            for _ in 0..<20 { group.addTask { await shared.value(maxAge: .milliseconds(1), check) } }
            // Every caller has joined the running check before it ends (each started its own
            // before this fix: then this waits out its deadline and the values below differ).
            let deadline = ContinuousClock.now + .seconds(10)
            while await shared.joined < 20, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(5)) }
            open.finish()
            return await group.reduce(into: [Int]()) { $0.append($1) }
        }
        #expect(values == Array(repeating: 1, count: 21), "one check for every probe while it ran")
        #expect(checks.withLock { $0 } == 1)
        #expect(await shared.value(maxAge: .milliseconds(1), check) == 2, "checked again once it ended and is maxAge old")
    }
}
