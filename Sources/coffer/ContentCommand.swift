import ArgumentParser
import CofferApp
import CofferCore
import CofferPostgres
import CofferS3
import CofferServer
import CofferStore
import Foundation
import Logging

/// Where a `content` command finds the store: the data directory's `content/`, or a bucket.
struct ContentStoreOptions: ParsableArguments {
    @Option(name: .customLong("data-dir"), help: "Data directory (database, content/).") var dataDir = "coffer-data"
    @Option(name: .customLong("content-store"), help: "s3://BUCKET[/PREFIX] (credentials: AWS_* variables). Default: DATA/content/.")
    var contentStore: String?
    @Option(name: .customLong("s3-endpoint"), help: "S3 endpoint URL for MinIO, R2, Ceph… (path-style). Default: AWS.") var s3Endpoint: String?
    @Option(name: .customLong("s3-region"), help: "The bucket's region.") var s3Region = "us-east-1"

    /// The settings `ContentStores` reads, for the bucket `url` (or this command's store).
    func configuration(store url: String?) -> CofferConfiguration {
        var configuration = CofferConfiguration()
        configuration.dataDirectory = dataDir
        configuration.contentStore = url
        configuration.s3Endpoint = s3Endpoint
        configuration.s3Region = s3Region
        return configuration
    }

    /// Runs `body` with the catalogue of `database` (else `COFFER_DATABASE_URL`), else of the
    /// data directory's SQLite, which must exist.
    func withCatalogue<T>(database: String?, _ body: (any CatalogueRepository & ContentPinRepository) async throws -> T) async throws -> T {
        if let database = database ?? ProcessInfo.processInfo.environment["COFFER_DATABASE_URL"].flatMap({ $0.isEmpty ? nil : $0 }) {
            return try await DatabaseOption.with(database) { backend in try await body(PostgresCatalogue(backend)) }
        }
        let path = DataDirectory(dataDir).database
        guard FileManager.default.fileExists(atPath: path) else {
            throw UsageError("no catalogue at \(path): pass --data-dir (or --database) of the server whose content this is")
        }
        let database = try IO.currentDatabase(path)
        defer { try? database.close() }
        return try await body(SQLiteCatalogue(database))
    }

    /// Opens the store (`url`, else `--content-store`, else the local directory) and runs
    /// `body`; the store's connections are closed afterwards.
    func with<T>(store url: String? = nil, _ body: (any ContentStore) async throws -> T) async throws -> T {
        var logger = Logger(label: "coffer")
        logger.logLevel = .warning
        let content: any ContentStore
        do {
            content = try await ContentStores.open(configuration(store: url ?? contentStore), shared: true, cleanTemporary: false, logger: logger)
        } catch {
            throw UsageError("\(error)")
        }
        do {
            let result = try await body(content)
            await ContentStores.close(content)
            return result
        } catch {
            await ContentStores.close(content)
            throw error
        }
    }
}

struct ContentCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "content",
        abstract: "Maintain the content store: remove unreferenced objects, copy a local store into a bucket, check every object.",
        subcommands: [GC.self, Migrate.self, Verify.self])

    struct GC: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "gc",
            abstract: "List (or, with --delete, remove) objects that no asset version references.",
            discussion: """
                A dry run by default: prints each unreferenced object and the total. Objects younger than \
                --min-age are kept (an upload that has not reached the catalogue yet), as are old versions \
                of an asset (tokens issued for them stay valid). With --delete it also aborts multipart \
                uploads and removes partial uploads older than --min-age.
                """)
        @OptionGroup var store: ContentStoreOptions
        @Option(help: ArgumentHelp(DatabaseOption.help + " Default: COFFER_DATABASE_URL when set.")) var database: String?
        @Option(name: .customLong("min-age"), help: "Keep objects younger than this many seconds.") var minAge = 86_400
        @Flag(help: "Remove them (default: only list).") var delete = false
        @Flag(help: "Delete even when the catalogue names objects the store does not hold (a sign of the wrong catalogue).") var force = false

        func run() async throws {
            guard minAge >= 0 else { throw UsageError("--min-age must be ≥ 0") }
            try await store.with { content in
                let cutoff = Date().addingTimeInterval(-TimeInterval(minAge))
                // Listed first, then the catalogue read: an object the catalogue names by the
                // time it is read is kept.
                let objects = try await content.objects()
                let referenced = try await referencedDigests()
                let held = Set(objects.map(\.sha256))
                let lost = referenced.subtracting(held)
                if !lost.isEmpty {
                    FileHandle.standardError.write(
                        Data(
                            "warning: the catalogue names \(lost.count) object(s) this store does not hold (e.g. \(lost.sorted()[0])): is this the catalogue of this store?\n"
                                .utf8))
                    if delete && !force {
                        throw UsageError(
                            "refusing to delete with a catalogue that does not match the store (check --data-dir/--database and --content-store, or pass --force)"
                        )
                    }
                }
                let unreferenced = objects.filter { !referenced.contains($0.sha256) }
                let old = unreferenced.filter { ($0.modified ?? .distantFuture) <= cutoff }
                var removed = 0
                var removedBytes: Int64 = 0
                for (index, object) in old.enumerated() {
                    if delete {
                        // Asked again just before: an upload of the same bytes since the listing keeps it.
                        guard try await content.delete(sha256: object.sha256, ifNotModifiedAfter: cutoff) else { continue }
                        removed += 1
                        removedBytes += object.size
                        FileHandle.standardError.write(Data("[\(index + 1)/\(old.count)] removed \(object.sha256) (\(object.size) bytes)\n".utf8))
                    } else {
                        print("unreferenced \(object.sha256) \(object.size) bytes")
                    }
                }
                let total = old.reduce(Int64(0)) { $0 + $1.size }
                let young = unreferenced.count - old.count
                let kept = young > 0 ? "; \(young) younger than \(minAge) s kept" : ""
                if delete {
                    let abandoned = try await content.removeAbandonedUploads(olderThan: TimeInterval(minAge))
                    print(
                        "removed \(removed) unreferenced object(s), \(removedBytes) bytes, and \(abandoned) abandoned upload(s); \(objects.count - removed) kept\(kept)"
                    )
                } else {
                    print(
                        "dry run: \(old.count) unreferenced object(s), \(total) bytes, of \(objects.count)\(kept); run with --delete to remove them")
                }
            }
        }

        func referencedDigests() async throws -> Set<String> {
            try await store.withCatalogue(database: database) { try await $0.referencedDigests() }
        }
    }

    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "verify",
            abstract: "Read every object the catalogue names whole and check it against its SHA-256; pin the right ones.",
            discussion: """
                Prints `ok`, `changed`, `missing`, `unreadable` or (in a bucket, right but with no pin \
                recorded) `unpinned` for each object an asset version names, and exits 1 when any is not ok. In a bucket, each object found right is pinned (its ETag recorded): from then \
                on ranges and accel-mode downloads of it ask for that version only. Run it once after \
                upgrading a deployment whose bucket holds objects uploaded before pins, after `content \
                migrate`, and whenever the bucket may have been written behind Coffer's back. Reads every \
                byte: a bucket's egress is charged.
                """)
        @OptionGroup var store: ContentStoreOptions
        @Option(help: ArgumentHelp(DatabaseOption.help + " Default: COFFER_DATABASE_URL when set.")) var database: String?

        func run() async throws {
            let (checked, bad) = try await store.withCatalogue(database: database) { catalogue in
                try await store.with { content in
                    ContentStores.attach(pins: catalogue, to: content)
                    let bucket = content as? S3ContentStore
                    if let bucket {
                        FileHandle.standardError.write(
                            Data("pins for \(bucket.pinLocation) (the server's --s3-endpoint must be spelled the same)\n".utf8))
                    }
                    let digests = try await catalogue.referencedDigests().sorted()
                    var bad = 0
                    for (index, sha256) in digests.enumerated() {
                        let (verdict, ok) = await Self.verify(sha256, in: content, pinning: bucket != nil)
                        if !ok { bad += 1 }
                        print(verdict)
                        FileHandle.standardError.write(Data("[\(index + 1)/\(digests.count)]\n".utf8))
                    }
                    return (digests.count, bad)
                }
            }
            print("verified \(checked) object(s): \(checked - bad) ok, \(bad) not")
            if bad > 0 { throw ExitCode(1) }
        }

        /// One line — `ok SHA SIZE bytes[ (pinned)]`, `changed SHA …`, `missing SHA`,
        /// `unreadable SHA: …`, or in a bucket `unpinned SHA …` (right, but no pin could be
        /// recorded) — and whether it is ok.
        static func verify(_ sha256: String, in content: any ContentStore, pinning: Bool) async -> (String, Bool) {
            do {
                // A bucket's object whose version is no longer the one pinned is what this re-checks:
                // its pin then counts as none.
                let before = try? await content.pinnedTag(sha256: sha256)
                switch try await content.checkWhole(sha256: sha256) {
                case .missing: return ("missing \(sha256)", false)
                case .changed(let read): return ("changed \(sha256): its \(read) bytes do not hash to its address", false)
                case .intact(let size):
                    let after = try await content.pinnedTag(sha256: sha256)
                    if pinning && after == nil {
                        return ("unpinned \(sha256) \(size) bytes: right, but the store gave no usable ETag or the pin was not recorded", false)
                    }
                    return ("ok \(sha256) \(size) bytes" + (after != before ? " (pinned)" : ""), true)
                }
            } catch {
                return ("unreadable \(sha256): \(error)", false)
            }
        }
    }

    struct Migrate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "migrate",
            abstract: "Copy the data directory's content/ into a bucket.",
            discussion: """
                Idempotent and resumable: an object the bucket already holds (same address, same size) is \
                skipped, so a run that was interrupted is simply run again. Each object is read from disk, \
                its SHA-256 checked against its address while it is sent (a damaged file is reported, not \
                copied), and its parts carry their own SHA-256. Progress goes to standard error; the exit \
                status is 1 when any object failed.
                """)
        @OptionGroup var store: ContentStoreOptions
        @Option(help: "The bucket: s3://BUCKET[/PREFIX].") var to: String

        func run() async throws {
            let local: LocalContentStore
            do { local = try LocalContentStore(root: DataDirectory(store.dataDir).content) } catch { throw UsageError("\(error)") }
            let objects = try local.objects()
            var copied = 0
            var skipped = 0
            var bytes: Int64 = 0
            var failed: [String] = []
            try await store.with(store: to) { target in
                for (index, object) in objects.enumerated() {
                    let step = "[\(index + 1)/\(objects.count)] \(object.sha256)"
                    if try await target.size(sha256: object.sha256) == object.size {
                        skipped += 1
                        FileHandle.standardError.write(Data("\(step) already there\n".utf8))
                        continue
                    }
                    do {
                        try await Self.copy(object, from: local, to: target)
                        copied += 1
                        bytes += object.size
                        FileHandle.standardError.write(Data("\(step) copied (\(object.size) bytes)\n".utf8))
                    } catch ContentStoreError.digestMismatch {
                        failed.append(object.sha256)
                        FileHandle.standardError.write(Data("\(step) FAILED: the file's bytes do not hash to its name (damaged on disk)\n".utf8))
                    } catch let error as ContentStoreError {
                        failed.append(object.sha256)
                        FileHandle.standardError.write(Data("\(step) FAILED: \(error)\n".utf8))
                    }
                }
            }
            print("copied \(copied) object(s) (\(bytes) bytes), \(skipped) already there, \(failed.count) failed, of \(objects.count)")
            if !failed.isEmpty { throw ExitCode(1) }
        }

        /// Streams one file into the bucket (1 MiB reads), declared by its address: the store
        /// writes it there and checks the whole SHA-256 before completing.
        static func copy(_ object: StoredObject, from local: LocalContentStore, to target: any ContentStore) async throws {
            guard let path = local.path(sha256: object.sha256), let handle = FileHandle(forReadingAtPath: path) else {
                throw ContentStoreError.io("cannot open \(object.sha256)")
            }
            defer { try? handle.close() }
            let upload = try await target.makeUpload(maxBytes: object.size, expectedSHA256: object.sha256)
            do {
                while true {
                    let chunk: Data
                    do { chunk = try handle.read(upToCount: 1024 * 1024) ?? Data() } catch { throw ContentStoreError.io("reading \(path): \(error)") }
                    if chunk.isEmpty { break }
                    try await upload.append(chunk)
                }
                _ = try await upload.finish(expectedSHA256: object.sha256)
            } catch {
                await upload.abort()
                throw error
            }
        }
    }
}
