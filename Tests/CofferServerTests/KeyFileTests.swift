import CofferApp
import CofferCore
import CofferTestSupport
import Crypto
import Dispatch
import Foundation
import Synchronization
import Testing

/// The data directory's key files: instances that start together on a fresh, shared data
/// directory end up with one token key and one ledger key (the file's), and a key file is
/// 0600 from its first byte, with nothing left beside it.
@Suite struct KeyFileTests {
    static func bytes(_ key: SymmetricKey) -> [UInt8] { key.withUnsafeBytes { Array($0) } }

    @Test func instancesStartingTogetherOnAFreshDirectoryShareOneTokenKeyAndOneLedgerKey() throws {
        for round in 0..<20 {
            let directory = try makeTemporaryDirectory(prefix: "coffer-keys-\(round)")
            defer { try? FileManager.default.removeItem(at: directory) }
            let starts = 8
            let tokens = Mutex<[[UInt8]]>([])
            let ledgers = Mutex<[String]>([])
            let failures = Mutex<[String]>([])
            // A thread each, released together: the starts race for the files for real.
            let gate = DispatchSemaphore(value: 0)
            let done = DispatchGroup()
            for _ in 0..<starts {
                done.enter()
                Thread.detachNewThread {
                    defer { done.leave() }
                    gate.wait()
                    do {
                        let token = try TokenKeyFile.signer(dataDirectory: directory.path, configured: nil)
                        let ledger = try LedgerKeyFile.signer(dataDirectory: directory.path)
                        tokens.withLock { $0.append(Self.bytes(token.active.key)) }
                        ledgers.withLock { $0.append(ledger.keyId) }
                    } catch {
                        failures.withLock { $0.append("\(error)") }
                    }
                }
            }
            for _ in 0..<starts { gate.signal() }
            done.wait()
            #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 })")
            let onFile = try TokenKeyFile.signer(dataDirectory: directory.path, configured: nil)
            let ledgerOnFile = try LedgerKeyFile.signer(dataDirectory: directory.path, create: false)
            #expect(tokens.withLock { $0 }.count == starts && tokens.withLock { $0 }.allSatisfy { $0 == Self.bytes(onFile.active.key) })
            #expect(ledgers.withLock { $0 }.count == starts && ledgers.withLock { $0 }.allSatisfy { $0 == ledgerOnFile.keyId })
            let keys = directory.appendingPathComponent("keys").path
            let left = try FileManager.default.contentsOfDirectory(atPath: keys).sorted()
            #expect(left == ["download-tokens.json", "ledger-signing.key"], "no temporary file left: \(left)")
            for name in left {
                let mode = try FileManager.default.attributesOfItem(atPath: keys + "/" + name)[.posixPermissions] as? Int
                #expect(mode == 0o600, "\(name)")
            }
        }
    }

    @Test func anExplicitLedgerKeyIsNeverWrittenOverAnother() throws {
        let directory = try makeTemporaryDirectory(prefix: "coffer-keys")
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("ledger.key").path
        // What a crash between the link and the unlink left (a second name of a key), and a
        // temporary file another process is writing right now.
        let stale = path + ".0C0FFEE0-0000-4000-8000-000000000000.tmp"
        let young = path + ".0C0FFEE1-0000-4000-8000-000000000000.tmp"
        #expect(FileManager.default.createFile(atPath: stale, contents: Data("old".utf8)))
        #expect(FileManager.default.createFile(atPath: young, contents: Data("new".utf8)))
        try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSinceNow: -3600)], ofItemAtPath: stale)
        let first = try LedgerKeyFile.create(at: path)
        #expect(throws: TokenKeyFile.KeyError.self) { try LedgerKeyFile.create(at: path) }
        #expect(try LedgerKeyFile.load(path).keyId == first.keyId)
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted() == ["ledger.key", (young as NSString).lastPathComponent])
    }

    /// The active key's id is part of every new download URL: one with a slash, `%`, `?`, `#`,
    /// a dot or nothing at all is refused when the file is read, not at the first download. A
    /// retired key's id may stay as it was (its tokens were issued already), but no key's may
    /// hold a dot or a space, or be empty or over 64 characters.
    @Test func aTokenKeyIdMustBeSafeInAURL() throws {
        let directory = try makeTemporaryDirectory(prefix: "coffer-key-ids")
        defer { try? FileManager.default.removeItem(at: directory) }
        let keys = directory.appendingPathComponent("keys")
        try FileManager.default.createDirectory(at: keys, withIntermediateDirectories: true)
        let secret = Data(repeating: 7, count: 32).base64EncodedString()
        func signer(_ id: String, retired: String? = nil) throws -> TokenSigner {
            let entries = [["id": id, "secret": secret]] + (retired.map { [["id": $0, "secret": secret]] } ?? [])
            let file: [String: Any] = ["active": id, "keys": entries]
            try JSONSerialization.data(withJSONObject: file).write(to: keys.appendingPathComponent("download-tokens.json"))
            return try TokenKeyFile.signer(dataDirectory: directory.path, configured: nil)
        }
        for good in ["k1", "2026-11_rotation~b", "7c9e6679-7425-40de-944b-e07c4f1e2a3d", String(repeating: "a", count: 64)] {
            #expect(throws: Never.self) { _ = try signer(good) }
        }
        for bad in ["", "k/2", "k%2", "k?2", "k#2", "k.2", "k 2", "ké", "k:2", String(repeating: "a", count: 65)] {
            #expect(throws: TokenKeyFile.KeyError.self, "\(bad)") { _ = try signer(bad) }
        }
        // Retired: kept as it was, but never empty, dotted, spaced or over 64.
        #expect(throws: Never.self) { _ = try signer("k2", retired: "old:key/1") }
        for bad in ["", "k.1", "k 1", String(repeating: "a", count: 65)] {
            #expect(throws: TokenKeyFile.KeyError.self, "retired \(bad)") { _ = try signer("k2", retired: bad) }
        }
    }
}
