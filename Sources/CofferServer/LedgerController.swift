import CofferCore
import Foundation
import Hummingbird
import Logging
import NIOCore
import ServiceLifecycle

/// The tamper-evident ledger for auditors: signed checkpoints, the public key, and the
/// chained export that `coffer ledger verify --export` checks offline.
struct LedgerController {
    let ledgerAudit: any LedgerAuditRepository
    let signer: LedgerSigner

    struct PublicKey: Encodable {
        var algorithm = "Ed25519"
        var keyId: String
        /// Base64 of the raw 32-byte key.
        var publicKey: String
        /// SubjectPublicKeyInfo PEM.
        var pem: String
    }

    func add(to group: RouterGroup<CofferRequestContext>) {
        group.get("/checkpoints") { request, _ in
            let (after, limit) = try Paging.parse(request)
            let items = try await ledgerAudit.checkpoints(after: after, limit: limit)
            return try JSON.response(Page(items: items, nextCursor: items.count == limit ? items.last.map { String($0.sequence) } : nil))
        }
        group.get("/checkpoints/latest") { _, _ in
            guard let latest = try await ledgerAudit.latestCheckpoint() else {
                throw Problem(.noCheckpoint, "no checkpoint has been signed yet (the ledger is empty or younger than the interval)")
            }
            return try JSON.response(latest)
        }
        group.get("/public-key") { _, _ in
            let key = signer.publicKey
            return try JSON.response(
                PublicKey(
                    keyId: signer.keyId, publicKey: key.rawRepresentation.base64EncodedString(),
                    pem: try LedgerKeys.pem(key)))
        }
    }

    /// `GET /v1/audit/export?kind=ledger`: header, every chained entry, then the checkpoints
    /// up to the last entry written, streamed page by page. The database is asked once before
    /// the 200 goes out: one that does not answer is a 503, not a 200 with an empty body.
    func export() async throws -> Response {
        let ledger = ledgerAudit
        let key = signer.publicKey
        _ = try await ledger.chainedEntries(after: 0, limit: 1)
        let body = ResponseBody { writer in
            try await ledger.export(publicKey: key, now: Date()) { chunk in try await writer.write(ByteBuffer(string: chunk)) }
            try await writer.finish(nil)
        }
        return Response(status: .ok, headers: [.contentType: "application/x-ndjson"], body: body)
    }
}
