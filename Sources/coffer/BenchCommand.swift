import ArgumentParser
import CofferCore
import Crypto
import Foundation

struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench", abstract: "Measure this machine, like `openssl speed`.", subcommands: [Verify.self, Tokens.self])

    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Verify one receipt or JWS repeatedly on one core (chain cache as in production).",
            discussion: "The last line is `verify: N/s`. Exits 1 if the input does not verify.")

        @Argument(help: "A receipt (DER, BER, base64) or JWS file.")
        var file: String

        @OptionGroup var trust: TrustOptions

        @Option(help: "How long to measure.")
        var seconds: Double = 3

        func validate() throws {
            guard seconds > 0, seconds <= 600 else { throw ValidationError("--seconds must be in (0, 600]") }
        }

        func run() async throws {
            let input = try IO.read(file)
            let verifier = AppStoreVerifier(
                configuration: VerifierConfiguration(anchors: try trust.anchors(), bundleIds: nil))
            let now = Date()
            let first = await verifier.verify(input, now: now)
            guard first.isValid else {
                print("not valid: \(first.error.map { "\($0)" } ?? "")")
                throw ExitCode(1)
            }
            let clock = ContinuousClock()
            let deadline = clock.now.advanced(by: .milliseconds(Int(seconds * 1000)))
            let start = clock.now
            var count = 0
            while clock.now < deadline {
                for _ in 0..<32 where await verifier.verify(input, now: now).isValid { count += 1 }
            }
            let elapsed = start.duration(to: clock.now)
            let perSecond = Double(count) / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18)
            print(
                "input: \(file) (\(input.count) bytes, \(first.evidence.kind?.rawValue ?? "?"), \(first.evidence.receipt?.inApp.count ?? 0) in-app records)"
            )
            print("verifications: \(count) in \(elapsed)")
            print("verify: \(Int(perSecond.rounded()))/s")
        }
    }

    struct Tokens: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "tokens", abstract: "Mint and verify download tokens on one core.",
            discussion: "The last two lines are `token mint: N/s` and `token verify: N/s`.")

        @Option(help: "How long to measure each.")
        var seconds: Double = 3

        func validate() throws {
            guard seconds > 0, seconds <= 600 else { throw ValidationError("--seconds must be in (0, 600]") }
        }

        func run() throws {
            let signer = TokenSigner(active: TokenKey(id: "k1", key: SymmetricKey(size: .bits256)))
            let claims = DownloadClaims(
                assetId: "levelpack1-levels", sha256: String(repeating: "ab", count: 32), redemptionId: UUID().uuidString.lowercased(),
                expiresAt: Int64(Date().timeIntervalSince1970) + 600)
            let token = signer.mint(claims)
            let now = Date()
            func measure(_ body: () -> Bool) -> Int {
                let clock = ContinuousClock()
                let deadline = clock.now.advanced(by: .milliseconds(Int(seconds * 1000)))
                let start = clock.now
                var count = 0
                while clock.now < deadline {
                    for _ in 0..<256 where body() { count += 1 }
                }
                let elapsed = start.duration(to: clock.now)
                return Int((Double(count) / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18)).rounded())
            }
            let mint = measure { !signer.mint(claims).isEmpty }
            let verify = measure { (try? signer.verify(token, now: now)) != nil }
            print("token: \(token.utf8.count) characters")
            print("token mint: \(mint)/s")
            print("token verify: \(verify)/s")
        }
    }
}
