import ArgumentParser
import CofferClient
import CofferCore
import CofferServer
import Foundation

typealias RFC3339Parsing = RFC3339

struct ReceiptCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "receipt", abstract: "Inspect App Store receipts and signed transactions.",
        subcommands: [Inspect.self])

    struct Inspect: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Verify and decode a receipt (PKCS#7 DER/BER/base64) or a StoreKit 2 JWS.",
            discussion: """
                Exit status: 0 when valid, 1 when invalid, 2 on usage or I/O errors. \
                Default trust roots: Apple Root CA and Apple Root CA - G3 (built in), \
                vouching for Production only unless --environment names Sandbox. \
                --root replaces them; a non-Apple root vouches for LocalTesting only \
                unless scoped: --root Sandbox=FILE, --root Xcode=FILE (never Production). \
                Chains are validated at the data's own signing time (receipt creation \
                date, JWS signedDate) unless --at is given.
                """)

        @Argument(help: "The file to inspect ('-' for standard input).")
        var file: String

        @OptionGroup var trust: TrustOptions

        @Option(name: .customLong("bundle-id"), help: "The bundle identifier the data must carry.")
        var bundleId: String?

        @Option(name: .customLong("at"), help: "Validate certificates at this ISO 8601 instant instead of the signing time.")
        var at: String?

        @Option(name: .customLong("device-id"), help: "A device identifier (UUID) to check the receipt hash against.")
        var deviceId: String?

        @Flag(help: "Print one JSON object.")
        var json = false

        func run() async throws {
            let input = try IO.read(file)
            let anchors = try trust.anchors()
            let validateAt = try IO.date(at, "--at")
            var device: [UInt8]?
            if let deviceId {
                guard let uuid = UUID(uuidString: deviceId) else { throw UsageError("--device-id: '\(deviceId)' is not a UUID") }
                device = withUnsafeBytes(of: uuid.uuid) { Array($0) }
            }
            let verifier = AppStoreVerifier(configuration: VerifierConfiguration(anchors: anchors, bundleIds: bundleId.map { [$0] }))
            let result = await verifier.verify(input, now: Date(), validateAt: validateAt, deviceIdentifier: device)
            if json {
                print(Terminal.safeJSON(InspectionReport.json(result)))
            } else {
                printHuman(result)
            }
            if !result.isValid { throw ExitCode(1) }
        }

        /// What a receipt says is the sender's text: a forged one's ids may hold escape
        /// sequences that rewrite "verdict: invalid" on the terminal. Every line made safe.
        func printHuman(_ result: VerificationResult) {
            func print(_ text: String) {
                Swift.print(text.split(separator: "\n", omittingEmptySubsequences: false).map { Terminal.safe(String($0)) }.joined(separator: "\n"))
            }
            let e = result.evidence
            if let error = result.error {
                print("verdict: invalid (\(error.code.rawValue)) \(error.detail)")
                if error.code == .chainUntrusted, error.detail.contains("Coffer Sandbox") {
                    print(
                        "hint: Coffer's sandbox CA signed this; trust its root with --root DATA/sandbox/root.pem "
                            + "(the demo's: coffer-data/sandbox/root.pem)")
                }
            } else {
                print("verdict: valid")
            }
            if let kind = e.kind { print("kind: \(kind.rawValue)") }
            if let env = e.environment { print("environment: \(env.rawValue)") }
            if let s = e.signing {
                print("signed: \(s.digest) by \(s.chain.joined(separator: " → ")), validated at \(RFC3339.format(s.validatedAt))")
            }
            if let r = e.receipt {
                print("bundle id: \(r.bundleId ?? "-")  app version: \(r.appVersion ?? "-")  created: \(r.creationDate.map(RFC3339.format) ?? "-")")
                for p in r.inApp {
                    var line = "  \(p.productId ?? "?") transaction \(p.transactionId ?? "?")"
                    if let d = p.purchaseDate { line += " purchased \(RFC3339.format(d))" }
                    if let d = p.cancellationDate { line += " CANCELLED \(RFC3339.format(d))" }
                    print(line)
                }
            }
            if e.payloadJSON != nil, let object = InspectionReport.object(result)["payload"],
                let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes])
            {
                print("payload: " + String(decoding: data, as: UTF8.self))
            }
        }
    }
}

/// `--root` / `--environment`, shared by the commands that verify.
struct TrustOptions: ParsableArguments {
    @Option(
        name: .customLong("root"),
        help: """
            A trust root certificate (DER or PEM), optionally scoped: [ENV=]FILE with ENV one of Sandbox, Xcode, \
            LocalTesting (Production for Apple's roots). Unscoped, a non-Apple root vouches for LocalTesting only. \
            Repeatable. Replaces the built-in Apple roots.
            """)
    var roots: [String] = []

    @Option(
        name: .customLong("environment"),
        help: "An environment to accept: Production, Sandbox, Xcode, LocalTesting. Repeatable. Default: Production (Apple roots).")
    var environments: [String] = []

    func anchors() throws -> [TrustAnchor] { try TrustRoots.anchors(roots: roots, environments: environments) }
}
