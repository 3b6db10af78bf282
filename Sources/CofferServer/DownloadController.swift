import CofferCore
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// Token-authorised downloads, streamed from the content store, with single Range support.
/// A streamed body holds one of its address's download slots and is closed when the client
/// stops reading for the stall timeout.
struct DownloadController {
    let tokens: TokenSigner
    let content: any ContentStore
    let catalogue: any CatalogueRepository
    let metrics: CofferMetrics
    let slots: DownloadSlots
    /// How the bytes reach the client (``CofferConfiguration/downloadMode``).
    let mode: DownloadMode
    /// X-Accel-Redirect mode (``CofferConfiguration/accelRedirectPrefix``).
    let accelRedirectPrefix: String?
    let stallTimeoutSeconds: Int64
    /// Objects a whole download found changed in the store: refused until they match again.
    let quarantine: ContentQuarantine
    /// Delivery evidence (nil: not recorded).
    var deliveries: DeliveryRecorder? = nil

    func add(to router: Router<CofferRequestContext>) {
        router.get("/v1/downloads/:token") { request, context in try await download(request, context: context, head: false) }
        router.head("/v1/downloads/:token") { request, context in try await download(request, context: context, head: true) }
    }

    func download(_ request: Request, context: CofferRequestContext, head: Bool) async throws -> Response {
        let claims = try verify(context.parameters.get("token") ?? "")
        // Found changed in the store: no byte of it, not even a range to resume the cut download.
        if quarantine.refuses(claims.sha256, content: content, logger: context.logger) {
            throw Problem(.contentStoreError, "the asset's bytes in the content store are not the ones uploaded; the server's operator has been told")
        }
        // A store that cannot answer is a 503/502 (ProblemMiddleware), not a missing asset.
        guard let size = try await content.size(sha256: claims.sha256) else {
            throw Problem(.assetMissing, "the asset's bytes are not in the content store")
        }
        let asset = try? await catalogue.asset(claims.assetId)
        let contentType = asset?.sha256 == claims.sha256 ? asset?.contentType ?? "application/octet-stream" : "application/octet-stream"
        let fileName = asset?.sha256 == claims.sha256 ? asset?.name ?? claims.assetId : claims.assetId
        // Bytes, never a page: an attachment, not sniffed, and sandboxed should a browser render
        // it anyway — an uploaded SVG or HTML asset must not run script on the console's origin.
        var headers: HTTPFields = [
            .contentType: contentType,
            .eTag: "\"\(claims.sha256)\"",
            .acceptRanges: "bytes",
            .cacheControl: "private, no-store",
            .contentDisposition: ContentDisposition.attachment(fileName),
            .xContentTypeOptions: "nosniff",
            .contentSecurityPolicy: "default-src 'none'; sandbox",
        ]
        let file = content.localFile(sha256: claims.sha256)
        // Handing the bytes off (redirect, accel) only for a GET, or for a local file: a
        // presigned URL is signed for GET, so a HEAD for a bucket's object is answered here.
        let handOff = !head || file != nil
        if mode == .redirect, handOff {
            let response = try redirect(claims, contentType: contentType, fileName: fileName)
            if !head { record(claims, sent: 0, finished: false, whole: false) }
            return response
        }
        // `If-Range` (RFC 9110 §13.1.5): a range only of these very bytes. A download resumed
        // with a new token after the asset changed names other bytes: the whole object, never
        // the new version's tail spliced onto the old head.
        let rangeHeader = Self.rangeApplies(ifRange: request.headers[.ifRange], sha256: claims.sha256) ? request.headers[.range] : nil
        if mode == .accel, handOff, let prefix = accelRedirectPrefix {
            // nginx sends the bytes: a file from its internal location (Range and If-Range
            // against the ETag added there), or the object through a presigned URL it proxies
            // (deploy/coffer_accel_s3_location) with the range decided here — the store would
            // compare If-Range with its own ETag (an MD5) and restart every resumed download.
            if let file {
                headers[.xAccelRedirect] = prefix + file.relativePath
            } else if let url = try presigned(claims, contentType: contentType, fileName: fileName),
                let scheme = url.range(of: "://"), let path = url[scheme.upperBound...].firstIndex(of: "/")
            {
                var scratch = HTTPFields()
                if case (.partialContent, let range?) = try Self.range(rangeHeader, size: size, headers: &scratch) {
                    headers[.xCofferRange] = "bytes=\(range.lowerBound)-\(range.upperBound)"
                }
                headers[.xAccelRedirect] = prefix + "s3" + url[path...]
                // nginx asks for the version whose bytes were checked (If-Match): it hashes
                // nothing, and a changed object then answers 412, which nginx turns into 502.
                if let tag = try await quarantining(claims, context, { try await content.pinnedTag(sha256: claims.sha256) }) {
                    headers[.xCofferIfMatch] = "\"\(tag)\""
                }
                // The store names the file (the presigned URL's response-content-disposition):
                // nginx would keep Coffer's across the redirect on its error answers too.
                headers[.contentDisposition] = nil
            } else {
                throw Problem(.contentStoreError, "this content store cannot hand downloads to nginx")
            }
            metrics.downloads.increment()
            if !head { record(claims, sent: 0, finished: false, whole: false) }
            return Response(status: .ok, headers: headers, body: .init())
        }
        let (status, range) = try Self.range(rangeHeader, size: size, headers: &headers)
        let length = range.map { $0.upperBound - $0.lowerBound + 1 } ?? 0
        headers[.contentLength] = String(length)
        guard let range, !head, length > 0 else {
            metrics.downloads.increment()
            if !head { record(claims, sent: 0, finished: true, whole: true) }
            return Response(status: status, headers: headers, body: .init())
        }
        var watch = try watch(context, redemptionId: claims.redemptionId)
        if let deliveries {
            let whole = length == size
            let now = Date()
            watch.onFinish = { sent, finished in
                deliveries.add(Self.report(claims, at: now, sent: sent, finished: finished, whole: whole))
            }
        }
        metrics.downloads.increment()
        metrics.downloadBytes.increment(by: length)
        if let file {
            return Response(status: status, headers: headers, body: FileStream.body(path: file.path, range: range, watch: watch))
        }
        // Opened before the head is sent: a store that fails or lost the object answers 502/503/404.
        let opened = try await quarantining(claims, context) { try await content.open(sha256: claims.sha256, range: range) }
        guard let chunks = opened else {
            throw Problem(.assetMissing, "the asset's bytes are not in the content store")
        }
        // A whole object is checked against its address as it passes (a range cannot be): a
        // whole download of an object changed in the bucket is cut short before its last chunk,
        // and the object is quarantined, so the cut download cannot be resumed with a range.
        let logger = context.logger
        let metrics = metrics
        let quarantine = quarantine
        let check = range.lowerBound == 0 && length == size ? claims.sha256 : nil
        return Response(
            status: status, headers: headers,
            body: FileStream.body(chunks: chunks, length: length, watch: watch, sha256: check) {
                quarantine.add(claims.sha256)
                metrics.contentMismatches.increment()
                logger.error(
                    "content store object does not match its SHA-256 (changed in the store?): download cut short, object refused until it matches",
                    metadata: ["sha256": "\(claims.sha256)", "asset": "\(claims.assetId)"])
            })
    }

    /// Runs `body`; an object found no longer the version pinned (``ContentStoreError/changed(_:)``)
    /// is refused to everyone (502) until the quarantine's whole re-read finds its right bytes.
    func quarantining<T>(_ claims: DownloadClaims, _ context: CofferRequestContext, _ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch ContentStoreError.changed(let detail) {
            quarantine.add(claims.sha256)
            metrics.contentMismatches.increment()
            context.logger.error(
                "content store object changed since its bytes were checked: refused until it matches",
                metadata: ["sha256": "\(claims.sha256)", "asset": "\(claims.assetId)"])
            throw ContentStoreError.changed(detail)
        }
    }

    /// Redirect mode: 302 to a presigned GET of the object, valid 60 s at most and never
    /// beyond the token's own expiry, answered with the asset's content type and file name.
    func redirect(_ claims: DownloadClaims, contentType: String, fileName: String) throws -> Response {
        guard let url = try presigned(claims, contentType: contentType, fileName: fileName) else {
            throw Problem(.contentStoreError, "this content store cannot hand out download URLs")
        }
        metrics.downloads.increment()
        return Response(status: .found, headers: [.location: url, .cacheControl: "private, no-store"], body: .init())
    }

    /// A presigned URL for the token's object: valid `min(60 s, the token's remaining life)`
    /// (whole seconds, rounded down); a token with less than a second left is expired.
    func presigned(_ claims: DownloadClaims, contentType: String, fileName: String) throws -> String? {
        let now = Date()
        let remaining = claims.expiresAt - Int64(now.timeIntervalSince1970.rounded(.up))
        guard remaining >= 1 else { throw Problem(.tokenExpired, "the download token has expired: redeem again or exchange the grant") }
        let expires = Int(min(Self.presignedLifetime, remaining))
        return content.presignedURL(sha256: claims.sha256, expires: expires, contentType: contentType, fileName: fileName, now: now)
    }

    /// Adds a download's evidence: hand-offs (redirect, accel) count as started, their bytes
    /// sent by the store or nginx.
    func record(_ claims: DownloadClaims, sent: Int64, finished: Bool, whole: Bool) {
        deliveries?.add(Self.report(claims, at: Date(), sent: sent, finished: finished, whole: whole))
    }

    static func report(_ claims: DownloadClaims, at: Date, sent: Int64, finished: Bool, whole: Bool) -> Delivery {
        Delivery(
            redemptionId: claims.redemptionId, assetId: claims.assetId, sha256: claims.sha256, firstAt: at, lastAt: Date(), downloads: 1,
            completed: finished ? 1 : 0, bytesServed: sent, complete: finished && whole)
    }

    /// Longest life of a presigned download URL, seconds.
    static let presignedLifetime: Int64 = 60

    /// The token's claims; 403 `tokenExpired` or `tokenInvalid` otherwise.
    func verify(_ token: String) throws -> DownloadClaims {
        do { return try tokens.verify(token, now: Date()) } catch {
            switch error {
            case .expired: throw Problem(.tokenExpired, "the download token has expired: redeem again or exchange the grant")
            case .invalid: throw Problem(.tokenInvalid, "the download token is not valid")
            }
        }
    }

    /// The status and byte range to send (nil for an empty object); a single satisfiable
    /// `Range` gives 206 and `Content-Range`, an unsatisfiable one 416.
    /// Whether a `Range` applies: no `If-Range`, or one naming exactly this ETag (a date, or a
    /// weak or other tag, is not these bytes: strong comparison, RFC 9110 §8.8.3.2).
    static func rangeApplies(ifRange: String?, sha256: String) -> Bool {
        guard let ifRange else { return true }
        return ifRange.trimmingCharacters(in: .whitespaces) == "\"\(sha256)\""
    }

    static func range(_ header: String?, size: Int64, headers: inout HTTPFields) throws -> (HTTPResponse.Status, ClosedRange<Int64>?) {
        let whole = size > 0 ? 0...(size - 1) : nil
        guard let header else { return (.ok, whole) }
        switch ByteRange.parse(header, size: size) {
        case .ignore: return (.ok, whole)
        case .unsatisfiable:
            throw Problem(
                .rangeNotSatisfiable, "range \(header.prefix(64)) is outside 0–\(size)",
                headers: [.contentRange: "bytes */\(size)"])
        case .range(let r):
            headers[.contentRange] = "bytes \(r.lowerBound)-\(r.upperBound)/\(size)"
            return (.partialContent, r)
        }
    }

    /// One of the client address's and the purchase's download slots and the stall
    /// watchdog's settings; 429 `tooManyDownloads` when either has none left.
    func watch(_ context: CofferRequestContext, redemptionId: String) throws -> FileStream.Watch {
        let slot: DownloadSlot
        switch slots.acquire(context.limitKey, redemptionId: redemptionId) {
        case .success(let acquired): slot = acquired
        case .failure(let refusal):
            metrics.rateLimited(route: "downloads")
            let (of, limit) = refusal == .address ? ("address", slots.perAddress) : ("purchase", slots.perPurchase)
            context.logger.notice("too many downloads", metadata: ["client": "\(context.clientAddress)", "of": "\(of)", "limit": "\(limit)"])
            throw Problem.tooManyDownloads(limit, of: refusal == .address ? "from this address" : "of this purchase")
        }
        let client = context.clientAddress
        let logger = context.logger
        let metrics = metrics
        let timeout = stallTimeoutSeconds
        return FileStream.Watch(
            channel: context.channel, stallTimeout: .seconds(timeout),
            onStall: {
                metrics.downloadStalls.increment()
                logger.notice("download stalled: no progress, connection closed", metadata: ["client": "\(client)", "seconds": "\(timeout)"])
            }, slot: slot)
    }
}

extension HTTPField.Name {
    static let xAccelRedirect = HTTPField.Name("X-Accel-Redirect")!
    /// The byte range nginx asks the store for, as Coffer decided it (never the client's
    /// `If-Range`); not sent on to the client (nginx keeps only a few headers across the redirect).
    static let xCofferRange = HTTPField.Name("X-Coffer-Range")!
    /// The version of the object nginx asks the store for (`If-Match`); kept inside like ``xCofferRange``.
    static let xCofferIfMatch = HTTPField.Name("X-Coffer-If-Match")!
}
