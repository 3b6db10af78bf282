import CofferCore
import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// The web console: `GET /console` (the page) and `GET /console/{file}` (its scripts and
/// styles), every byte from the binary (`ConsoleAssets`, generated from `console/`). No
/// authentication here: the page holds no data; it calls the API with the key the user types,
/// as a bearer token (no cookies, so no CSRF).
struct ConsoleController {
    struct File: Sendable {
        var bytes: ByteBuffer
        var contentType: String
        /// A strong validator: the SHA-256 of the bytes.
        var etag: String
    }

    let files: [String: File]
    /// Debug builds only: `COFFER_CONSOLE_DIR` serves the files from that directory on each
    /// request, so the console can be edited without rebuilding.
    let developmentDirectory: String?

    /// Nothing but the binary's own files: no inline script or style, no other origin,
    /// no framing, no forms posted anywhere.
    static let contentSecurityPolicy =
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; "
        + "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

    init(assets: [(name: String, text: String?, base64: String?)] = ConsoleAssets.files) {
        var files: [String: File] = [:]
        for asset in assets {
            guard let bytes = asset.text.map({ Array($0.utf8) }) ?? asset.base64.flatMap({ Data(base64Encoded: $0) }).map({ Array($0) }) else {
                continue
            }
            files[asset.name] = Self.file(name: asset.name, bytes: bytes)
        }
        self.files = files
        #if DEBUG
            developmentDirectory = ProcessInfo.processInfo.environment["COFFER_CONSOLE_DIR"]
        #else
            developmentDirectory = nil
        #endif
    }

    static func file(name: String, bytes: [UInt8]) -> File {
        File(
            bytes: ByteBuffer(bytes: bytes), contentType: MediaType.of(fileName: name),
            etag: "\"" + SHA256.hash(data: bytes).hexString.prefix(32) + "\"")
    }

    func add(to router: Router<CofferRequestContext>) {
        router.get("/console") { request, _ in try serve("index.html", request) }
        router.get("/console/:file") { request, context in try serve(context.parameters.get("file") ?? "", request) }
        router.head("/console") { request, _ in try serve("index.html", request).withoutBody() }
        router.head("/console/:file") { request, context in try serve(context.parameters.get("file") ?? "", request).withoutBody() }
    }

    func serve(_ name: String, _ request: Request) throws -> Response {
        guard let file = try lookup(name) else { throw Problem(.notFound, "no such console file") }
        var headers: HTTPFields = [
            .contentType: file.contentType, .eTag: file.etag, .cacheControl: "no-cache",
            .contentSecurityPolicy: Self.contentSecurityPolicy, .xContentTypeOptions: "nosniff", .referrerPolicy: "no-referrer",
            .xFrameOptions: "DENY",
        ]
        if let tags = request.headers[.ifNoneMatch],
            tags.split(separator: ",").contains(where: { $0.trimmingCharacters(in: .whitespaces) == file.etag })
        {
            headers[.contentType] = nil
            return Response(status: .notModified, headers: headers)
        }
        headers[.contentLength] = String(file.bytes.readableBytes)
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: file.bytes))
    }

    private func lookup(_ name: String) throws -> File? {
        guard let developmentDirectory else { return files[name] }
        // Names as the generator allows them; the canonical-path middleware already refused `..`.
        guard name.first != ".", name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "._-".contains($0)) }),
            let data = FileManager.default.contents(atPath: developmentDirectory + "/" + name)
        else { return nil }
        return Self.file(name: name, bytes: Array(data))
    }
}

extension Response {
    /// The same head (length included), no body: a HEAD's answer.
    func withoutBody() -> Response { Response(status: status, headers: headers, body: .init()) }
}

extension HTTPField.Name {
    static let referrerPolicy = Self("Referrer-Policy")!
    static let xFrameOptions = Self("X-Frame-Options")!
}
