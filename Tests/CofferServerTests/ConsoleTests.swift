import CofferCore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

@testable import CofferServer

/// The web console is served from the binary, exactly the files of console/, under a
/// Content-Security-Policy that allows nothing but those files and calls to this origin.
@Suite struct ConsoleTests {
    static var directory: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("console")
    }

    static func files() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { !$0.hasPrefix(".") }.sorted()
    }

    @Test("embedded console files are byte-identical to console/ (run scripts/embed-console)")
    func embeddedMatchFiles() throws {
        let files = try Self.files()
        #expect(ConsoleAssets.files.map(\.name) == files)
        for asset in ConsoleAssets.files {
            let onDisk = try Data(contentsOf: Self.directory.appendingPathComponent(asset.name))
            let embedded = asset.text.map { Data($0.utf8) } ?? asset.base64.flatMap { Data(base64Encoded: $0) }
            #expect(embedded == onDisk, "\(asset.name) differs from its embedded copy: run scripts/embed-console")
        }
    }

    @Test func pageAndFilesAreServedUnderAStrictPolicy() async throws {
        let h = try await Harness.make()
        defer { h.cleanUp() }
        try await h.app.test(.router) { client in
            let page = try await client.execute(uri: "/console", method: .get)
            #expect(page.status == .ok)
            #expect(page.headers[.contentType] == "text/html; charset=utf-8")
            let csp = try #require(page.headers[.contentSecurityPolicy])
            #expect(csp.contains("default-src 'none'") && csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"))
            #expect(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"))
            #expect(page.headers[.xContentTypeOptions] == "nosniff")
            #expect(page.headers[HTTPField.Name("Referrer-Policy")!] == "no-referrer")
            #expect(Data(buffer: page.body) == (try Data(contentsOf: Self.directory.appendingPathComponent("index.html"))))

            for name in try Self.files() {
                let file = try await client.execute(uri: "/console/\(name)", method: .get)
                #expect(file.status == .ok, "\(name)")
                #expect(file.headers[.contentType] == MediaType.of(fileName: name))
                #expect(file.headers[.contentSecurityPolicy] == csp)
                let etag = try #require(file.headers[.eTag])
                let again = try await client.execute(uri: "/console/\(name)", method: .get, headers: [.ifNoneMatch: etag])
                #expect(again.status == .notModified, "\(name): a revalidation with the ETag is 304")
            }
            let head = try await client.execute(uri: "/console", method: .head)
            #expect(head.status == .ok && head.body.readableBytes == 0)
            #expect(head.headers[.contentSecurityPolicy] == csp)
            let missing = try await client.execute(uri: "/console/nope.js", method: .get)
            #expect(missing.status == .notFound)
            #expect(Harness.code(missing) == "notFound")
            // Only canonical paths: no directory listing, no way out of the embedded set.
            #expect(try await client.execute(uri: "/console/", method: .get).status == .badRequest)
            #expect(try await client.execute(uri: "/console/..%2FPackage.swift", method: .get).status == .badRequest)
        }
    }

    /// What the policy would block anyway, kept out of the source: inline scripts, inline
    /// event handlers, inline styles, anything from another origin.
    @Test func consoleSourceHasNoInlineScriptStyleOrForeignOrigin() throws {
        for name in try Self.files() where name.hasSuffix(".html") || name.hasSuffix(".js") || name.hasSuffix(".css") {
            let text = try String(contentsOf: Self.directory.appendingPathComponent(name), encoding: .utf8)
            // Nothing from another origin (the SVG namespace is a name, not a fetch).
            let urls = text.replacingOccurrences(of: "http://www.w3.org/", with: "")
            #expect(!urls.contains("http://") && !urls.contains("https://") && !urls.contains("//cdn"), "\(name) names another origin")
            if name.hasSuffix(".html") {
                for tag in text.components(separatedBy: "<script").dropFirst() {
                    #expect(tag.prefix { $0 != ">" }.contains("src="), "\(name): every script is a file")
                }
                #expect(text.range(of: #"\son[a-z]+\s*="#, options: .regularExpression) == nil, "\(name): no inline event handler")
                #expect(text.range(of: #"\sstyle\s*="#, options: .regularExpression) == nil, "\(name): no inline style")
                #expect(!text.contains("<style"), "\(name): no style element")
            }
            if name.hasSuffix(".js") {
                #expect(!text.contains("eval(") && !text.contains("new Function"), "\(name): no eval")
                #expect(!text.contains(".innerHTML =") && !text.contains(".innerHTML="), "\(name): DOM built with textContent")
                #expect(!text.contains("localStorage"), "\(name): the key lives in memory or sessionStorage only")
            }
        }
    }
}
