/// A sandbox CA's directory (`coffer sandbox init --dir`, or `DATA/sandbox` in demo mode):
/// the CA's files by name, and the demo keys kept beside them.
public struct SandboxDirectory: Sendable, Hashable {
    public let path: String

    public init(_ path: String) { self.path = path }

    /// One of the CA's files (see `SandboxCA.FileName`).
    public func file(_ name: String) -> String { DataDirectory.join(path, name) }

    /// The demo admin and auditor keys' secrets (0600), so that a restart reuses them.
    public var demoKeys: String { file("demo-keys.json") }
}
