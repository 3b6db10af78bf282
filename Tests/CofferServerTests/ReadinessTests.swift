import Synchronization
import Testing

@testable import CofferServer

/// `/readyz` answers anyone: its database check runs once at a time and is shared.
@Suite struct ReadinessTests {
    /// A check that counts its runs and, until `open()`, waits (one runs at a time here: the
    /// gate is one stream, read by one check).
    final class GatedCheck: Sendable {
        private let count = Mutex(0)
        private let gate: AsyncStream<Void>
        private let opener: AsyncStream<Void>.Continuation

        init() { (gate, opener) = AsyncStream<Void>.makeStream() }

        var runs: Int { count.withLock { $0 } }
        func open() { opener.finish() }

        func run() async -> Int {
            let n = count.withLock {
                $0 += 1
                return $0
            }
            for await _ in gate {}
            return n
        }
    }

    /// Waits until `count` callers joined the running check (a condition, with a deadline).
    static func joined(_ shared: SharedOutcome<Int>, _ count: Int) async {
        let deadline = ContinuousClock.now + .seconds(10)
        while await shared.joined < count, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(5)) }
    }

    @Test("callers during a check wait for it and share its value, until it is maxAge old")
    func oneCheckAtATimeSharedForItsAge() async {
        let shared = SharedOutcome<Int>()
        let gated = GatedCheck()
        let values = await withTaskGroup(of: Int.self) { group in
            for _ in 0..<20 { group.addTask { await shared.value(maxAge: .seconds(60)) { await gated.run() } } }
            // One started the check and the other nineteen wait for it, before it ends.
            await Self.joined(shared, 19)
            gated.open()
            return await group.reduce(into: [Int]()) { $0.append($1) }
        }
        #expect(values == Array(repeating: 1, count: 20), "twenty probes, one check")
        #expect(await shared.value(maxAge: .seconds(60)) { await gated.run() } == 1)
        #expect(await shared.value(maxAge: .zero) { await gated.run() } == 2, "once maxAge old, checked again")
        #expect(gated.runs == 2)
    }

    /// A check slower than `maxAge` (a database that takes seconds to answer) is still the one
    /// check: probes arriving after `maxAge` while it runs wait for it instead of starting more.
    @Test func aCheckSlowerThanMaxAgeIsStillTheOnlyOne() async {
        let shared = SharedOutcome<Int>()
        let gated = GatedCheck()
        let values = await withTaskGroup(of: Int.self) { group in
            group.addTask { await shared.value(maxAge: .milliseconds(1)) { await gated.run() } }
            // The first check has started (a condition, not a guess), and is older than maxAge.
            while gated.runs == 0 { await Task.yield() }
            try? await Task.sleep(for: .milliseconds(20))
            for _ in 0..<20 { group.addTask { await shared.value(maxAge: .milliseconds(1)) { await gated.run() } } }
            // Every caller has joined the running check before it ends (each started its own
            // before this fix: then this waits out its deadline and the values below differ).
            await Self.joined(shared, 20)
            gated.open()
            return await group.reduce(into: [Int]()) { $0.append($1) }
        }
        #expect(values == Array(repeating: 1, count: 21), "one check for every probe while it ran")
        #expect(gated.runs == 1)
        #expect(await shared.value(maxAge: .milliseconds(1)) { await gated.run() } == 2, "checked again once it ended and is maxAge old")
    }
}
