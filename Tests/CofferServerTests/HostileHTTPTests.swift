import CofferCore
import CofferSandbox
import CofferTestSupport
import Foundation
import Hummingbird
import HummingbirdTesting
import Testing

/// Mutated receipts and JWS over HTTP: never accepted, never a 5xx; and a valid receipt sent
/// in many small transfer chunks is the same receipt.
@Suite struct HostileHTTPTests {
    /// Bit flips, truncations and length-byte edits of one DER receipt.
    static func mutations(of bytes: [UInt8], rng: inout SplitMix64) -> [[UInt8]] {
        var out: [[UInt8]] = []
        for _ in 0..<80 {
            var m = bytes
            m[Int.random(in: 0..<m.count, using: &rng)] ^= UInt8(1) << UInt8.random(in: 0..<8, using: &rng)
            out.append(m)
        }
        for _ in 0..<25 { out.append(Array(bytes.prefix(Int.random(in: 1..<bytes.count, using: &rng)))) }
        for index in stride(from: 1, to: min(bytes.count, 120), by: 4) {
            for value: UInt8 in [0x00, 0x80, 0x84, 0xFF] where bytes[index] != value {
                var m = bytes
                m[index] = value
                out.append(m)
            }
        }
        return out
    }

    @Test func mutatedReceiptsAndJWSAreRefusedWith4xx() async throws {
        let h = try await Harness.make(configure: { $0.redemptionsPerMinute = 0 })
        defer { h.cleanUp() }
        var rng = SplitMix64(state: 0x5EED)
        let original = try #require(Base64.decode(try Harness.receipt("9100")))
        let jws = try Harness.ca.mintTransaction(
            TransactionSpec(bundleId: Harness.bundle, productId: Harness.product, transactionId: "9200"), now: Date())
        var bodies: [ByteBuffer] = try Self.mutations(of: original, rng: &rng).map { try Harness.body(["receipt": Data($0).base64EncodedString()]) }
        var jwsBytes = Array(jws.utf8)
        for _ in 0..<60 {
            var m = jwsBytes
            m[Int.random(in: 0..<m.count, using: &rng)] = Array("A0_-.=x".utf8)[Int.random(in: 0..<7, using: &rng)]
            if m != jwsBytes { bodies.append(try Harness.body(["signedTransaction": String(decoding: m, as: UTF8.self)])) }
        }
        jwsBytes.removeLast(10)
        bodies.append(try Harness.body(["signedTransaction": String(decoding: jwsBytes, as: UTF8.self)]))
        // Broken envelopes around a valid receipt.
        let valid = Data(original).base64EncodedString()
        for raw in [
            "{\"receipt\":\"\(valid.prefix(valid.count / 2))", "{\"receipt\":\"\(valid)\"", "[\"\(valid)\"]", "{\"receipt\":1}", "\u{0}\u{1}",
        ] {
            bodies.append(ByteBuffer(string: raw))
        }
        let all = bodies
        let statuses = try await h.app.test(.router) { client in
            var statuses: [HTTPResponse.Status] = []
            for body in all {
                let r = try await client.execute(uri: "/v1/redemptions", method: .post, headers: Harness.jsonHeaders, body: body)
                statuses.append(r.status)
            }
            return statuses
        }
        #expect(statuses.count > 250)
        #expect(statuses.allSatisfy { (400..<500).contains($0.code) }, "\(Dictionary(grouping: statuses, by: \.code).mapValues(\.count))")
        #expect(try await h.services.ledger.redemptions(AuditFilter()).isEmpty, "no mutation was redeemed")
    }

    @Test func aReceiptInManySmallChunksIsTheSameReceipt() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        let body = "{\"receipt\":\"\(try Harness.receipt("9300"))\"}"
        try await h.app.test(.live) { client in
            let port = try #require(client.port)
            let connection = try RawConnection(port: port)
            var request = "POST /v1/redemptions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            var rest = Substring(body)
            var size = 1
            while !rest.isEmpty {
                let chunk = rest.prefix(size)
                request += String(chunk.utf8.count, radix: 16) + "\r\n" + chunk + "\r\n"
                rest = rest.dropFirst(chunk.count)
                size = size % 97 + 13
            }
            request += "0\r\n\r\n"
            await connection.send(request)
            // A bound for a stalled server, not a speed check: a loaded CI machine once took over 10 s.
            let answer = await connection.receive(seconds: 60)
            #expect(answer.hasPrefix("HTTP/1.1 201"), "\(answer.prefix(200))")
        }
        #expect(try await h.services.ledger.redemptions(AuditFilter()).map(\.transactionId) == ["9300"])
    }
}
