import CofferCore
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// Admins: upload asset bytes, define products.
struct AdminController {
    let vault: Vault
    let catalogue: any CatalogueRepository
    let adminLog: any AdminLogRepository
    let content: any ContentStore
    /// To look the request's key up again when a long upload ends.
    let keys: any KeyRepository
    /// Uploads in progress.
    let uploads: Gate
    /// Largest asset upload, bytes.
    let uploadLimit: Int64
    let bodyTimeout: Duration
    /// The bundle ids the server verifies receipts for: a product of any other app could
    /// never be redeemed.
    let bundleIds: Set<String>

    struct ProductBody: Decodable {
        var bundleId: String
        var type: ProductType
        var assetIds: [String]
        var title: String
        /// Whether a family member's shared copy unlocks it (default false).
        var familyShareable: Bool?
        /// A non-renewing subscription's length in seconds (required for that type, refused for others).
        var durationSeconds: Int64?
    }

    static func validIdentifier(_ id: String) -> Bool {
        (1...128).contains(id.utf8.count)
            && id.utf8.allSatisfy { c in
                (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == 0x2E || c == 0x5F || c == 0x2D
            }
    }

    func add(to group: RouterGroup<CofferRequestContext>) {
        group.put("/assets/:assetId") { request, context in try await upload(request, context: context) }
        group.get("/assets") { _, _ in try JSON.response(try await catalogue.assets()) }
        group.get("/assets/:assetId") { _, context in
            let id = context.parameters.get("assetId") ?? ""
            guard let asset = try await catalogue.asset(id) else { throw Problem(.unknownAsset, "no asset \(id.prefix(128))") }
            return try JSON.response(asset)
        }
        group.get("/assets/:assetId/versions") { _, context in
            let id = context.parameters.get("assetId") ?? ""
            let versions = try await catalogue.versions(of: id)
            guard !versions.isEmpty else { throw Problem(.unknownAsset, "no asset \(id.prefix(128))") }
            return try JSON.response(versions)
        }
        group.put("/products/:productId") { request, context in try await putProduct(request, context: context) }
        group.post("/revocations") { request, context in
            struct Body: Decodable {
                var transactionId: String
                var reason: String
                /// Needed only when the transaction id was redeemed in more than one environment.
                var environment: String?
            }
            let body = try await JSON.decode(Body.self, from: request, context: context, limit: 4096, timeout: bodyTimeout)
            guard (1...64).contains(body.transactionId.utf8.count), (1...500).contains(body.reason.utf8.count) else {
                throw Problem(.malformedRequest, "transactionId must be 1–64 characters and reason 1–500")
            }
            let environment = try body.environment.map { name in
                guard let environment = Environment(rawValue: name) else {
                    throw Problem(.malformedRequest, "environment must be Production, Sandbox, Xcode or LocalTesting")
                }
                return environment
            }
            let entry = entry(context, .redemptionRevoke, target: body.transactionId, detail: body.reason)
            let revocation = try await vault.revoke(
                transactionId: body.transactionId, environment: environment, reason: body.reason, by: context.identity?.name ?? "?", now: entry.at,
                logging: entry)
            note(context, entry)
            return try JSON.response(revocation, status: .created)
        }
        group.get("/audit-log") { request, _ in
            let (after, limit) = try Paging.parse(request)
            let items = try await adminLog.actions(after: after, limit: limit)
            return try JSON.response(Page(items: items, nextCursor: items.count == limit ? items.last.map { String($0.sequence) } : nil))
        }
        group.get("/products") { _, _ in try JSON.response(try await catalogue.products()) }
        group.delete("/products/:productId") { _, context in
            let id = context.parameters.get("productId") ?? ""
            let entry = entry(context, .productDelete, target: id, detail: "")
            guard try await catalogue.deleteProduct(id, logging: entry) else { throw Problem(.unknownProduct, "no product \(id.prefix(128))") }
            note(context, entry)
            return Response(status: .noContent)
        }
    }

    /// Streams the body into the content store (never whole in memory), verifying
    /// `Content-Digest: sha-256=:…:` when sent; each upload makes a new asset version.
    func upload(_ request: Request, context: CofferRequestContext) async throws -> Response {
        let assetId = context.parameters.get("assetId") ?? ""
        guard Self.validIdentifier(assetId) else {
            throw Problem(.invalidAssetId, "asset ids are 1–128 characters of A–Z a–z 0–9 . _ -")
        }
        let limit = uploadLimit
        if let declared = request.headers[.contentLength].flatMap(Int64.init), declared > limit {
            throw Problem(.payloadTooLarge, "asset exceeds the upload limit of \(limit) bytes")
        }
        var expected: String?
        if let digest = request.headers[.contentDigest] {
            guard let hex = Self.sha256(fromContentDigest: digest) else {
                throw Problem(.malformedRequest, "Content-Digest must be sha-256=:<base64>:")
            }
            expected = hex
        }
        // A re-upload without `?name=` keeps the asset's name; the type is the one sent, or the
        // name's (curl's `--data-binary` form type is no asset's type).
        let given = try Self.assetName(query: request.uri.query)
        let name = if let given { given } else { try await catalogue.asset(assetId)?.name ?? assetId }
        let sent = request.headers[.contentType].flatMap { $0.lowercased().hasPrefix("application/x-www-form-urlencoded") ? nil : $0 }
        if let sent, !UploadText.isMediaType(sent) {
            throw Problem(
                .malformedRequest,
                "Content-Type must be a media type (type/subtype[; name=value]) of at most \(UploadText.maxMediaTypeLength) ASCII characters")
        }
        let contentType = sent ?? MediaType.forUpload(fileName: name)
        guard uploads.enter() else {
            throw Problem(
                .uploadsBusy, "\(uploads.capacity) uploads are in progress; retry later",
                headers: [.retryAfter: "5"])
        }
        defer { uploads.leave() }
        let writer = try await content.makeUpload(maxBytes: limit, expectedSHA256: expected)
        let stored: (sha256: String, size: Int64)
        do {
            for try await buffer in request.body {
                try await writer.append(buffer.readableBytesView)
            }
            stored = try await writer.finish(expectedSHA256: expected)
        } catch ContentStoreError.tooLarge {
            await writer.abort()
            throw Problem(.payloadTooLarge, "asset exceeds the upload limit of \(limit) bytes")
        } catch ContentStoreError.digestMismatch {
            await writer.abort()
            throw Problem(.digestMismatch, "the body does not match Content-Digest")
        } catch {
            await writer.abort()
            throw error
        }
        // The key was checked when the request began, and an upload can last as long as its
        // client keeps sending: a key revoked since (`coffer keys revoke`, a leak being
        // contained) makes no new version. The bytes stay unreferenced (`coffer content gc`).
        try await checkKeyStillLive(context)
        let entry = entry(context, .assetUpload, target: assetId, detail: "")
        let asset = try await catalogue.addAssetVersion(
            assetId: assetId, name: name, contentType: contentType, size: stored.size, sha256: stored.sha256, at: entry.at,
            logging: { asset in Self.uploadEntry(entry, asset) })
        note(context, Self.uploadEntry(entry, asset))
        return try JSON.response(asset, status: .created)
    }

    /// 401 when the request's key has been revoked (or removed) since it was checked.
    func checkKeyStillLive(_ context: CofferRequestContext) async throws {
        guard let identity = context.identity else { throw Problem(.unauthenticated, "send Authorization: Bearer <key>") }
        let current: APIKey?
        do { current = try await keys.key(secretHash: identity.secretHash) } catch {
            throw Problem.unavailable(internalDetail: "key lookup failed: \(error)")
        }
        guard let current, current.keyId == identity.keyId, current.revokedAt == nil else {
            context.logger.notice("upload refused: its key was revoked while it was sent", metadata: ["key": "\(identity.displayName)"])
            throw Problem(.unauthenticated, "the key was revoked during the upload", headers: [.wwwAuthenticate: "Bearer"])
        }
    }

    /// The admin-log entry of an action by this request's key: the repositories store it in
    /// the change's own transaction, so no change lands without it.
    func entry(_ context: CofferRequestContext, _ action: AdminActionName, target: String, detail: String) -> AdminAction {
        AdminAction(
            at: Date(), keyId: context.identity?.keyId ?? "?", keyName: context.identity?.name ?? "?", action: action, target: target, detail: detail,
            clientAddress: context.clientAddress)
    }

    /// An upload's entry, once its version is known.
    static func uploadEntry(_ entry: AdminAction, _ asset: Asset) -> AdminAction {
        var logged = entry
        logged.detail = CatalogueLog.uploadDetail(asset)
        return logged
    }

    /// Writes a logged action to the server log too, once it is stored — its text escaped as
    /// the ledger stores it: a reason is an admin's free text, and a newline in it would
    /// forge the next line of the server's log.
    func note(_ context: CofferRequestContext, _ entry: AdminAction) {
        let safe = AdminAction.escapedForLedger(entry)
        context.logger.notice(
            "admin action", metadata: ["action": "\(safe.action)", "target": "\(safe.target)", "detail": "\(safe.detail)", "by": "\(safe.keyName)"])
    }

    /// The `name` query parameter of an upload, decoded strictly: nil when absent; 400
    /// `invalidAssetName` when it is given twice, badly percent-encoded, not valid UTF-8, or
    /// breaks ``UploadText/assetNameProblem(_:)`` (empty, too long, a control, invisible or
    /// bidirectional character, a slash).
    static func assetName(query: String?) throws -> String? {
        guard let query else { return nil }
        var found: [UInt8]?
        for pair in query.utf8.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let parts = pair.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.first.map({ Array($0) }) == Array("name".utf8) else { continue }
            guard found == nil else { throw invalidAssetName("name is given more than once") }
            guard let bytes = parts.count == 2 ? percentDecodedStrictly(parts[1]) : [] else {
                throw invalidAssetName("name is not correctly percent-encoded")
            }
            found = bytes
        }
        guard let bytes = found else { return nil }
        guard bytes.count <= UploadText.maxAssetNameBytes, let name = String(validating: bytes, as: UTF8.self) else {
            throw invalidAssetName(
                bytes.count > UploadText.maxAssetNameBytes
                    ? "name must be 1–\(UploadText.maxAssetNameBytes) bytes of UTF-8" : "name is not valid UTF-8")
        }
        if let problem = UploadText.assetNameProblem(name) { throw invalidAssetName(problem) }
        return name
    }

    private static func invalidAssetName(_ detail: String) -> Problem { Problem(.invalidAssetName, detail) }

    /// `%XX` decoded (no `+` for space, as Hummingbird reads queries); nil for a malformed escape.
    static func percentDecodedStrictly(_ text: some Collection<UInt8>) -> [UInt8]? {
        var out: [UInt8] = []
        var iterator = text.makeIterator()
        while let c = iterator.next() {
            guard c == UInt8(ascii: "%") else {
                out.append(c)
                continue
            }
            guard let h = iterator.next().flatMap(Hex.nibble), let l = iterator.next().flatMap(Hex.nibble) else { return nil }
            out.append(h << 4 | l)
        }
        return out
    }

    static func sha256(fromContentDigest header: String) -> String? {
        for item in header.split(separator: ",") {
            let trimmed = item.trimmingCharacters(in: .whitespaces)
            guard trimmed.lowercased().hasPrefix("sha-256=:"), trimmed.hasSuffix(":"), trimmed.count > 10 else { continue }
            let base64 = trimmed.dropFirst(9).dropLast()
            guard let bytes = Base64.decode(String(base64)), bytes.count == 32 else { return nil }
            return bytes.hexString
        }
        return nil
    }

    func putProduct(_ request: Request, context: CofferRequestContext) async throws -> Response {
        let productId = context.parameters.get("productId") ?? ""
        guard Self.validIdentifier(productId) else {
            throw Problem(.invalidProductId, "product ids are 1–128 characters of A–Z a–z 0–9 . _ -")
        }
        let body = try await JSON.decode(
            ProductBody.self, from: request, context: context, limit: 64 * 1024, timeout: bodyTimeout)
        guard Self.validIdentifier(body.bundleId), !body.title.isEmpty, body.title.utf8.count <= 256, body.assetIds.count <= 1000 else {
            throw Problem(.malformedRequest, "bundleId must be an identifier, title 1–256 characters, at most 1000 assets")
        }
        // Titles reach admins' terminals and auditors' exports: no escape sequences, no line breaks.
        guard !body.title.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw Problem(.malformedRequest, "title must not contain control characters")
        }
        guard bundleIds.contains(body.bundleId) else {
            throw Problem(
                .bundleMismatch,
                "bundle \(body.bundleId) is not one this server verifies (--bundle-id: \(bundleIds.sorted().joined(separator: ", ")))")
        }
        switch (body.type, body.durationSeconds) {
        case (.nonRenewing, nil): throw Problem(.malformedRequest, "a nonRenewing product needs durationSeconds (its length)")
        case (.nonRenewing, let d?) where d < 60 || d > 10 * 366 * 86400:
            throw Problem(.malformedRequest, "durationSeconds must be 60 s – 10 years")
        case (.consumable, _?), (.nonConsumable, _?), (.autoRenewable, _?):
            throw Problem(.malformedRequest, "durationSeconds is only for nonRenewing products (an auto-renewable's end is Apple's expiresDate)")
        default: break
        }
        // An id no upload could have made is unknown without asking the store (a NUL would
        // reach PostgreSQL, which refuses it: a 503 for a bad request).
        for id in body.assetIds {
            if Self.validIdentifier(id), try await catalogue.asset(id) != nil { continue }
            throw Problem(.unknownAsset, "asset \(LedgerText.escaped(id, maxBytes: 128)) has not been uploaded", status: .unprocessableContent)
        }
        let product = Product(
            productId: productId, bundleId: body.bundleId, type: body.type, assetIds: body.assetIds, title: body.title, updatedAt: Date(),
            familyShareable: body.familyShareable ?? false, durationSeconds: body.durationSeconds)
        let entry = entry(context, .productPut, target: productId, detail: CatalogueLog.productDetail(product))
        try await catalogue.putProduct(product, logging: entry)
        note(context, entry)
        return try JSON.response(product)
    }
}

extension HTTPField.Name {
    /// RFC 9530 `Content-Digest` (the literal is a valid field name).
    static let contentDigest = HTTPField.Name("Content-Digest")!
}
