import Foundation

/// Why the vault refused a request: a ``ProblemCode`` (stable; it appears in HTTP problem
/// bodies and refused attempts) and a detail for people.
public struct VaultFailure: Error, Hashable, Sendable, CustomStringConvertible {
    public var code: ProblemCode
    public var detail: String
    /// The HTTP status: the code's (``ProblemCode/status``), except for ``incomplete(_:)``.
    public var status: Int

    public init(_ code: ProblemCode, _ detail: String) {
        self.code = code
        self.detail = detail
        self.status = code.status
    }

    public var description: String { "\(code.rawValue): \(detail)" }

    /// Storage failed: not the client's fault, and nothing was half-written (503).
    public var isUnavailable: Bool { status == 503 }

    public static func malformedRequest(_ detail: String) -> Self { .init(.malformedRequest, detail) }

    /// A proof that did not verify: 400 when it could not be read (`malformed`,
    /// `limitExceeded`), 422 when it was read and refused.
    public static func verification(_ error: VerificationError) -> Self { .init(ProblemCode(error.code), error.detail) }

    /// A proof that verified but lacks what a purchase must carry: `malformed` like an unreadable
    /// proof, but 422 — the request was well-formed; what Apple signed is unusable. (Kept apart
    /// from `malformed`'s 400 since the first release: clients tell the two cases apart.)
    public static func incomplete(_ detail: String) -> Self {
        var failure = Self(.malformed, detail)
        failure.status = 422
        return failure
    }
}
