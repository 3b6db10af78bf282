import CofferCore
import Crypto
import Logging
import Synchronization

/// Objects whose bytes were found not to be the ones their address names (changed in the
/// bucket behind Coffer's back), and so are served to nobody: a whole download of one is cut
/// short before its last chunk, and without this a client resuming it with `Range` would be
/// sent the rest — a range cannot be checked against the address — and hold the forged
/// object whole.
///
/// Every request for a quarantined object (GET or HEAD, whole or ranged, any download mode)
/// is a 502 `contentStoreError`. The object is read whole again in the background while
/// requests for it arrive — ``recheckAfter`` after it was found changed, then twice as long
/// after each re-read that finds it still changed (up to 128 times) — and when it matches its
/// address again (an operator put the right bytes back, or re-uploaded the asset), it is
/// served again. The set lives in this process, and a restart empties it: another instance
/// quarantines an object when one of its own downloads finds it changed: a whole one by its
/// digest, a range by the store's 412 to the pinned version (``ContentStoreError/changed(_:)``;
/// README, "Object storage").
public final class ContentQuarantine: Sendable {
    struct Entry {
        var checking = false
        var lastCheck: ContinuousClock.Instant
        /// Re-reads that found the object still changed: each doubles the wait before the
        /// next (``recheckAfter`` up to 128 times it), so requests for a large object that
        /// stays changed cannot keep the store sending it whole every ``recheckAfter``.
        var failures = 0

        func due(_ recheckAfter: Duration, now: ContinuousClock.Instant) -> Bool {
            now - lastCheck >= recheckAfter * (1 << min(failures, 7))
        }
    }

    private let entries = Mutex<[String: Entry]>([:])
    /// Whether any object is quarantined: every download asks, and nearly always none is.
    private let any = Atomic<Bool>(false)
    let recheckAfter: Duration
    static let liftedEntries = 10_000

    public init(recheckAfter: Duration = .seconds(30)) {
        self.recheckAfter = recheckAfter
    }

    /// The objects quarantined now.
    public var count: Int { entries.withLock { $0.count } }

    /// The re-reads that found `sha256` changed, if it is quarantined (tests).
    func failures(_ sha256: String) -> Int? { entries.withLock { $0[sha256]?.failures } }

    /// Objects lifted in the last ``liftMemory``, with the failures they had: one found changed
    /// again soon after (its re-read matched but no pin was recorded, or it is being swapped
    /// back and forth) goes on waiting longer, instead of being re-read every ``recheckAfter``.
    private let lifted = Mutex<[String: (failures: Int, at: ContinuousClock.Instant)]>([:])
    static let liftMemory = Duration.seconds(600)

    /// Quarantines `sha256` (its check just failed).
    func add(_ sha256: String) {
        let now = ContinuousClock.now
        let before = lifted.withLock { lifted in
            lifted = lifted.filter { now - $0.value.at < Self.liftMemory }
            return lifted.removeValue(forKey: sha256)?.failures
        }
        entries.withLock { entries in
            // A re-read already running goes on (a second one would read the object again).
            var entry = entries[sha256] ?? Entry(lastCheck: .now, failures: before.map { $0 + 1 } ?? 0)
            entry.lastCheck = .now
            entries[sha256] = entry
            any.store(true, ordering: .releasing)
        }
    }

    /// Whether `sha256` is quarantined; if so and no check ran for ``recheckAfter``, starts one
    /// that reads the whole object from `content` and lifts the quarantine when it matches.
    func refuses(_ sha256: String, content: any ContentStore, logger: Logger) -> Bool {
        guard any.load(ordering: .acquiring) else { return false }
        let start: Bool? = entries.withLock { entries in
            guard var entry = entries[sha256] else { return nil }
            guard !entry.checking, entry.due(recheckAfter, now: .now) else { return false }
            entry.checking = true
            entries[sha256] = entry
            return true
        }
        guard let start else { return false }
        if start {
            Task.detached { [self] in
                let matches = await Self.matches(sha256, content: content, logger: logger)
                let failures = entries.withLock { entries in
                    if matches {
                        let failures = entries.removeValue(forKey: sha256)?.failures ?? 0
                        any.store(!entries.isEmpty, ordering: .releasing)
                        return failures
                    } else {
                        entries[sha256]?.checking = false
                        entries[sha256]?.lastCheck = .now
                        entries[sha256]?.failures += 1
                    }
                    return 0
                }
                if matches {
                    lifted.withLock { lifted in
                        if lifted.count >= Self.liftedEntries { lifted.removeAll(keepingCapacity: true) }
                        lifted[sha256] = (failures, .now)
                    }
                    logger.notice("content store object matches its SHA-256 again: served again", metadata: ["sha256": "\(sha256)"])
                }
            }
        }
        return true
    }

    /// Reads the whole object and compares its digest with its address (false on any failure).
    /// With `read`, not `open`: an instance's cache would start a copy of its own from `open`,
    /// reading the object from the store a second time.
    static func matches(_ sha256: String, content: any ContentStore, logger: Logger) async -> Bool {
        do {
            if case .intact = try await content.checkWhole(sha256: sha256) { return true }
            return false
        } catch {
            logger.warning("content store object could not be checked again", metadata: ["sha256": "\(sha256)", "error": "\(error)"])
            return false
        }
    }
}
