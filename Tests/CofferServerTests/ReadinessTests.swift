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
}
