import AsyncHTTPClient
import CofferCore
import Crypto
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOHTTP1

/// What went wrong talking to a Coffer server.
public enum ClientError: Error, CustomStringConvertible, Sendable {
    /// The server answered with an RFC 9457 problem: the request was refused (exit 1).
    case problem(status: Int, code: String, detail: String)
    /// The server could not be reached, timed out, or answered something that is not Coffer's.
    case transport(String)
    /// A local file, flag or manifest is wrong (exit 2).
    case usage(String)

    public var description: String {
        switch self {
        case .problem(let status, let code, let detail): Terminal.safe("\(status) \(code): \(detail)")
        case .transport(let detail): Terminal.safe(detail)
        case .usage(let detail): Terminal.safe(detail)
        }
    }
}

/// A client of a running Coffer server's admin and audit API, authenticated with an API key
/// sent as a bearer token. One `HTTPClient` (timeouts on connect and on every read), shut
/// down by ``withClient(server:key:_:)``.
public struct CofferAPIClient: Sendable {
    public let server: String
    let key: String
    let http: HTTPClient
    /// Attempts of a request the server answered 503 `uploadsBusy`/`busy`/`auditBusy` (honouring `Retry-After`).
    let attempts: Int

    /// Runs `body` with a client of `server` (an `http://` or `https://` base URL), shutting the
    /// HTTP client down afterwards whatever happens.
    public static func withClient<T: Sendable>(
        server: String, key: String, attempts: Int = 6, _ body: (CofferAPIClient) async throws -> T
    ) async throws -> T {
        var base = server
        while base.hasSuffix("/") { base.removeLast() }
        guard let url = URL(string: base), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host != nil,
            url.query == nil
        else {
            throw ClientError.usage("--server \(server): expected an http:// or https:// URL such as http://127.0.0.1:8080")
        }
        guard !key.isEmpty, key.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            throw ClientError.usage("the API key is empty or has spaces or control characters")
        }
        var configuration = HTTPClient.Configuration(
            timeout: .init(connect: .seconds(10), read: .seconds(120)), ignoreUncleanSSLShutdown: false, decompression: .disabled)
        configuration.redirectConfiguration = .disallow
        if scheme == "http", let host = url.host, !["127.0.0.1", "localhost", "::1", "[::1]"].contains(host.lowercased()) {
            FileHandle.standardError.write(
                Data("coffer: warning: the API key goes to \(host) unencrypted (http://); use https:// beyond this machine\n".utf8))
        }
        let http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        let client = CofferAPIClient(server: base, key: key, http: http, attempts: max(1, attempts))
        do {
            let result = try await body(client)
            try await http.shutdown()
            return result
        } catch {
            try? await http.shutdown()
            throw error
        }
    }

    /// `path` plus a query built from `query` (percent-encoded).
    func url(_ path: String, _ query: [(String, String)] = []) -> String {
        guard !query.isEmpty else { return server + path }
        var components = URLComponents()
        components.queryItems = query.map { URLQueryItem(name: $0.0, value: $0.1) }
        // `+` is a literal in Coffer's query parsing; URLComponents leaves it unescaped.
        let encoded = (components.percentEncodedQuery ?? "").replacingOccurrences(of: "+", with: "%2B")
        return server + path + "?" + encoded
    }

    func request(_ method: HTTPMethod, _ path: String, _ query: [(String, String)] = []) -> HTTPClientRequest {
        var request = HTTPClientRequest(url: url(path, query))
        request.method = method
        request.headers.add(name: "Authorization", value: "Bearer \(key)")
        request.headers.add(name: "User-Agent", value: "coffer-cli")
        return request
    }

    /// Sends a request with a JSON (or no) body and returns the JSON answer's bytes; a problem
    /// answer throws ``ClientError/problem(status:code:detail:)``.
    public func call(
        _ method: HTTPMethod, _ path: String, query: [(String, String)] = [], json body: (any Encodable)? = nil, limit: Int = 64 << 20
    ) async throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let bodyBytes = try body.map { try encoder.encode($0) }
        return try await retrying {
            var request = self.request(method, path, query)
            if let bodyBytes {
                request.headers.add(name: "Content-Type", value: "application/json")
                request.body = .bytes(ByteBuffer(data: bodyBytes))
            }
            let response = try await self.execute(request, timeout: .seconds(60))
            let bytes = try await Self.collect(response, limit: limit)
            try Self.check(response, bytes)
            return Data(buffer: bytes)
        }
    }

    /// Decodes a JSON answer (dates as the server writes them: ISO 8601).
    public func get<T: Decodable>(_ type: T.Type, _ path: String, query: [(String, String)] = []) async throws -> T {
        try Self.decode(type, from: try await call(.GET, path, query: query))
    }

    /// JSON as the server writes it (sorted keys, ISO 8601 dates).
    public static func encode(_ value: some Encodable) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var c = encoder.singleValueContainer()
            try c.encode(RFC3339.format(date))
        }
        return try encoder.encode(value)
    }

    static func decode<T: Decodable>(_ type: T.Type, from data: Data) throws -> T {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let text = try decoder.singleValueContainer().decode(String.self)
            guard let date = RFC3339.parse(text) else {
                throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not a date: \(text)"))
            }
            return date
        }
        do { return try decoder.decode(type, from: data) } catch {
            throw ClientError.transport("the server's answer is not what Coffer sends: \(error)")
        }
    }

    /// Uploads a file as a new version of `assetId`, streamed from disk with its SHA-256 as
    /// `Content-Digest`; `progress` is called with the bytes sent so far.
    public func upload(
        file path: String, assetId: String, name: String, contentType: String?, sha256: [UInt8], size: Int64,
        progress: @escaping @Sendable (Int64) -> Void
    ) async throws -> Asset {
        let data = try await retrying {
            var request = self.request(.PUT, "/v1/admin/assets/" + (try Identifier.segment(assetId, "asset")), [("name", name)])
            if let contentType { request.headers.add(name: "Content-Type", value: contentType) }
            request.headers.add(name: "Content-Digest", value: "sha-256=:\(Data(sha256).base64EncodedString()):")
            request.body = .stream(FileChunks(path: path, progress: progress), length: .known(size))
            // No overall deadline for a large file: the read timeout bounds each wait.
            let response = try await self.execute(request, timeout: .hours(24))
            let bytes = try await Self.collect(response, limit: 1 << 20)
            try Self.check(response, bytes)
            return Data(buffer: bytes)
        }
        let asset = try Self.decode(Asset.self, from: data)
        // The server verified the digest it was sent; an answer naming other bytes is not Coffer's.
        guard asset.sha256 == Hex.encode(sha256), asset.size == size, asset.assetId == assetId else {
            throw ClientError.transport("the server stored \(asset.assetId) as \(asset.sha256) (\(asset.size) bytes), not the file sent")
        }
        return asset
    }

    /// Streams a GET answer (an export) chunk by chunk into `sink`, reporting bytes received.
    public func download(
        _ path: String, query: [(String, String)], progress: @escaping @Sendable (Int64) -> Void, into sink: (ByteBuffer) throws -> Void
    ) async throws -> Int64 {
        // A busy server is asked again (after its Retry-After) before the first byte arrives.
        let response = try await retrying {
            let response = try await self.execute(self.request(.GET, path, query), timeout: .hours(24))
            guard response.status == .ok else {
                let bytes = try await Self.collect(response, limit: 1 << 20)
                try Self.check(response, bytes)
                throw ClientError.transport("unexpected \(response.status.code) from \(path)")
            }
            return response
        }
        var written: Int64 = 0
        for try await chunk in response.body {
            try sink(chunk)
            written += Int64(chunk.readableBytes)
            progress(written)
        }
        return written
    }

    func execute(_ request: HTTPClientRequest, timeout: TimeAmount) async throws -> HTTPClientResponse {
        do { return try await http.execute(request, timeout: timeout) } catch let error as ClientError { throw error } catch {
            throw ClientError.transport("\(server) did not answer: \(error)")
        }
    }

    /// Runs `attempt`, again after `Retry-After` (at most 30 s) while the server answers 503
    /// `uploadsBusy`, `busy` or `auditBusy`, up to ``attempts`` times.
    func retrying<T: Sendable>(_ attempt: @Sendable () async throws -> T) async throws -> T {
        var tries = 0
        while true {
            tries += 1
            do { return try await attempt() } catch RetryAfter.wait(let seconds, let problem) {
                guard tries < attempts else { throw problem }
                try await Task.sleep(for: .seconds(seconds))
            }
        }
    }

    enum RetryAfter: Error { case wait(Int, ClientError) }

    static func collect(_ response: HTTPClientResponse, limit: Int) async throws -> ByteBuffer {
        do { return try await response.body.collect(upTo: limit) } catch {
            throw ClientError.transport("the answer could not be read: \(error)")
        }
    }

    /// Throws the problem of a 4xx/5xx answer (``RetryAfter`` for a busy server).
    static func check(_ response: HTTPClientResponse, _ body: ByteBuffer) throws {
        let status = Int(response.status.code)
        guard status >= 300 else { return }
        struct Problem: Decodable {
            var code: String?
            var detail: String?
            var title: String?
        }
        let problem = try? JSONDecoder().decode(Problem.self, from: Data(buffer: body))
        let error = ClientError.problem(
            status: status, code: problem?.code ?? "http\(status)",
            detail: problem?.detail ?? problem?.title ?? String(response.status.reasonPhrase))
        if status == 503, ["uploadsBusy", "busy", "auditBusy"].contains(problem?.code) {
            let seconds = response.headers.first(name: "Retry-After").flatMap(Int.init) ?? 1
            throw RetryAfter.wait(min(max(seconds, 1), 30), error)
        }
        throw error
    }
}

/// A file read in 256 KiB chunks as an upload body, reporting bytes read.
struct FileChunks: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let path: String
    let progress: @Sendable (Int64) -> Void

    struct AsyncIterator: AsyncIteratorProtocol {
        var handle: FileHandle?
        let path: String
        let progress: @Sendable (Int64) -> Void
        var sent: Int64 = 0

        mutating func next() async throws -> ByteBuffer? {
            if handle == nil {
                guard let opened = FileHandle(forReadingAtPath: path) else { throw ClientError.usage("cannot read \(path)") }
                handle = opened
            }
            guard let data = try handle?.read(upToCount: 256 * 1024), !data.isEmpty else {
                try handle?.close()
                return nil
            }
            sent += Int64(data.count)
            progress(sent)
            return ByteBuffer(data: data)
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(handle: nil, path: path, progress: progress) }
}
