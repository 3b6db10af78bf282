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

    public init(recheckAfter: Duration = .seconds(30)) {
        self.recheckAfter = recheckAfter
    }

    /// The objects quarantined now.
    public var count: Int { entries.withLock { $0.count } }

    /// Quarantines `sha256` (its check just failed).
    func add(_ sha256: String) {
        entries.withLock { entries in
            // A re-read already running goes on (a second one would read the object again).
            var entry = entries[sha256] ?? Entry(lastCheck: .now)
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
                entries.withLock { entries in
                    if matches {
                        entries[sha256] = nil
                        any.store(!entries.isEmpty, ordering: .releasing)
                    } else {
                        entries[sha256]?.checking = false
                        entries[sha256]?.lastCheck = .now
                        entries[sha256]?.failures += 1
                    }
                }
                if matches {
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
            guard let size = try await content.size(sha256: sha256) else { return false }
            var hasher = SHA256()
            var read: Int64 = 0
            if size > 0 {
                for try await chunk in content.read(sha256: sha256, range: 0...(size - 1)) {
                    hasher.update(data: chunk)
                    read += Int64(chunk.count)
                }
            }
            return read == size && hasher.finalize().hexString == sha256
        } catch {
            logger.warning("content store object could not be checked again", metadata: ["sha256": "\(sha256)", "error": "\(error)"])
            return false
        }
    }
}
