import CofferCore
import CofferSandbox
import Foundation
import Testing

enum Fixtures {
    struct Missing: Error { var path: String }

    static var root: URL {
        get throws {
            guard let url = Bundle.module.resourceURL?.appendingPathComponent("Fixtures") else { throw Missing(path: "Fixtures") }
            return url
        }
    }

    static func bytes(_ path: String) throws -> [UInt8] {
        let url = try root.appendingPathComponent(path)
        guard let data = FileManager.default.contents(atPath: url.path) else { throw Missing(path: path) }
        return [UInt8](data)
    }

    static func text(_ path: String) throws -> String { String(decoding: try bytes(path), as: UTF8.self) }

    /// `expected.json` from ../shared/vectors.
    static func expected() throws -> [String: Any] {
        let object = try JSONSerialization.jsonObject(with: Data(try bytes("expected.json")))
        guard let dict = object as? [String: Any] else { throw Missing(path: "expected.json") }
        return dict
    }

    static func entries(_ section: String) throws -> [[String: Any]] {
        (try expected()[section] as? [[String: Any]]) ?? []
    }
}

/// The instant these tests treat as "now" (the day the vectors were checked).
let testNow = Date(timeIntervalSince1970: 1_795_305_600)  // 2026-11-22T00:00:00Z

func date(_ text: String) throws -> Date { try #require(RFC3339.parse(text)) }

/// One sandbox CA for the whole suite: RSA key generation is slow.
let sharedCA: SandboxCA = {
    do { return try SandboxCA.create(now: testNow) } catch { fatalError("sandbox CA: \(error)") }
}()

func sandboxVerifier(_ ca: SandboxCA = sharedCA, bundleIds: Set<String>? = ["com.coffer.demo"], extra: [TrustAnchor] = []) throws -> AppStoreVerifier
{
    AppStoreVerifier(configuration: VerifierConfiguration(anchors: [try ca.anchor()] + extra, bundleIds: bundleIds))
}

func appleVerifier(allowSandbox: Bool = true, bundleIds: Set<String>? = nil) throws -> AppStoreVerifier {
    AppStoreVerifier(configuration: VerifierConfiguration(anchors: try TrustAnchor.appleRoots(allowSandbox: allowSandbox), bundleIds: bundleIds))
}

func demoReceipt(_ transactionId: String = "1000", product: String = "level.pack.1") -> ReceiptSpec {
    ReceiptSpec(bundleId: "com.coffer.demo", purchases: [PurchaseSpec(productId: product, transactionId: transactionId)])
}

func expectInvalid(_ result: VerificationResult, _ code: VerificationError.Code, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(result.error?.code == code, "expected \(code), got \(result.error.map { "\($0)" } ?? "valid")", sourceLocation: sourceLocation)
}
