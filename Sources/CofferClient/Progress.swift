import Foundation
import Synchronization

/// A progress display on standard error: a bar redrawn in place on a terminal (bytes, rate,
/// ETA), plain lines at most every 2 s when standard error is a file or a pipe.
public final class Progress: Sendable {
    let label: String
    let total: Int64?
    let terminal: Bool
    let write: @Sendable (String) -> Void
    let started: ContinuousClock.Instant
    /// Bytes so far and when the display was last drawn.
    let state = Mutex<(bytes: Int64, drawn: ContinuousClock.Instant?)>((0, nil))

    public init(
        label: String, total: Int64?, terminal: Bool = isatty(2) == 1,
        write: @escaping @Sendable (String) -> Void = { FileHandle.standardError.write(Data($0.utf8)) }
    ) {
        self.label = Terminal.safe(label)
        self.total = total
        self.terminal = terminal
        self.write = write
        self.started = .now
    }

    public func update(_ bytes: Int64) {
        let now = ContinuousClock.now
        let draw = state.withLock { s -> Bool in
            s.bytes = bytes
            // The last chunk is drawn by `finish()`.
            if let total, bytes >= total { return false }
            let interval: Duration = terminal ? .milliseconds(100) : .seconds(2)
            guard s.drawn.map({ now - $0 >= interval }) ?? true else { return false }
            s.drawn = now
            return true
        }
        if draw { write(line(bytes, at: now, done: false)) }
    }

    public func finish() {
        let bytes = state.withLock { $0.bytes }
        write(line(bytes, at: .now, done: true))
    }

    func line(_ bytes: Int64, at now: ContinuousClock.Instant, done: Bool) -> String {
        let elapsed = max((now - started) / .seconds(1), 0.001)
        let rate = Double(bytes) / elapsed
        var text = "\(label) \(Self.bytes(Double(bytes)))"
        if let total, total > 0 {
            let fraction = min(Double(bytes) / Double(total), 1)
            text += " / \(Self.bytes(Double(total))) \(Int(fraction * 100))%"
            if terminal {
                let width = 24
                let filled = Int(fraction * Double(width))
                text = "[" + String(repeating: "#", count: filled) + String(repeating: " ", count: width - filled) + "] " + text
            }
            if !done, rate > 0 { text += "  ETA \(Self.duration(Double(total - bytes) / rate))" }
        }
        text += "  \(Self.bytes(rate))/s"
        if done { text += "  done in \(Self.duration(elapsed))" }
        return terminal ? "\r\u{1B}[K" + text + (done ? "\n" : "") : text + "\n"
    }

    public static func bytes(_ n: Double) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = n
        var unit = 0
        while value >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(Int(value)) B" : String(format: "%.1f", value) + " " + units[unit]
    }

    static func duration(_ seconds: Double) -> String {
        guard seconds.isFinite else { return "?" }
        let s = Int(seconds.rounded())
        return s < 60 ? "\(s)s" : s < 3600 ? "\(s / 60)m\(s % 60)s" : "\(s / 3600)h\((s % 3600) / 60)m"
    }
}
