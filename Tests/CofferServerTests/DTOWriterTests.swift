import CofferTestSupport
import Foundation
import Testing

@testable import CofferCore
@testable import CofferServer

/// The redemption answer's hand-written JSON is byte for byte what Foundation's encoder (with
/// the server's settings) writes — on generated values, including every control character,
/// quotes, backslashes, slashes, non-ASCII text and absent optionals.
@Suite struct DTOWriterTests {
    static let alphabet: [String] =
        (0..<0x20).map { String(UnicodeScalar(UInt8($0))) } + [
            "\"", "\\", "/", "a", "Z", "0", " ", "\u{7F}", "é", "日本", "🎮", "\u{2028}", "\u{FEFF}", "</script>", "%", "'",
        ]

    static func text(_ rng: inout SplitMix64) -> String {
        (0..<Int.random(in: 0...12, using: &rng)).map { _ in alphabet.randomElement(using: &rng) ?? "" }.joined()
    }

    static func response(_ rng: inout SplitMix64) -> RedemptionResponse {
        let date = { (rng: inout SplitMix64) in Date(timeIntervalSince1970: Double(Int64.random(in: -86_400 * 400...4_102_444_800, using: &rng))) }
        let redemption = Redemption(
            redemptionId: text(&rng), transactionId: text(&rng), originalTransactionId: Bool.random(using: &rng) ? text(&rng) : nil,
            productId: text(&rng), bundleId: "b", environment: text(&rng), purchaseDate: nil, quantity: 1, receiptSHA256: "",
            sourceFormat: .appReceipt,
            redeemedAt: Date(), clientAddress: "", appAccountToken: nil, grantHash: "")
        let assets = (0..<Int.random(in: 0...3, using: &rng)).map { _ in
            IssuedAsset(
                asset: Asset(
                    assetId: text(&rng), version: 1, name: text(&rng), contentType: text(&rng), size: Int64.random(in: 0...Int64.max, using: &rng),
                    sha256: text(&rng), createdAt: Date()),
                token: text(&rng), expiresAt: date(&rng))
        }
        return RedemptionResponse(
            RedemptionOutcome(
                redemption: redemption, grant: Bool.random(using: &rng) ? text(&rng) : nil, assets: assets, restored: Bool.random(using: &rng),
                entitlementEndsAt: Bool.random(using: &rng) ? date(&rng) : nil))
    }

    @Test("500 generated answers: the writer's bytes are the encoder's")
    func writerMatchesTheEncoder() throws {
        var rng = SplitMix64(state: 20_261_126)
        for _ in 0..<500 {
            let response = Self.response(&rng)
            let expected = try JSON.encoder.encode(response)
            #expect(response.json == Array(expected), "\(String(decoding: expected, as: UTF8.self))")
        }
    }
}
