import Foundation
import Testing

@testable import CofferPostgres

/// The embedded PostgreSQL migrations are the files of `migrations/postgres/`, byte for byte,
/// and each splits into the statements it holds.
@Suite struct PostgresMigrationTests {
    static var directory: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("migrations/postgres")
    }

    @Test func embeddedMatchFiles() throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.directory.path).filter { $0.hasSuffix(".sql") }.sorted()
        #expect(files.map { String($0.dropLast(4)) } == PostgresMigrations.all.map(\.name))
        for (file, migration) in zip(files, PostgresMigrations.all) {
            let text = try String(contentsOf: Self.directory.appendingPathComponent(file), encoding: .utf8)
            #expect(text == migration.sql, "\(file) differs from its embedded copy")
        }
    }

    @Test func statementsSplitOutsideFunctionBodies() {
        let statements = PostgresBackend.statements(
            "-- a comment\nCREATE TABLE a (x int);\n\nCREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $$\nBEGIN\n    RAISE EXCEPTION 'no';\nEND\n$$;\nCREATE TRIGGER t BEFORE UPDATE ON a FOR EACH ROW EXECUTE FUNCTION f();\n"
        )
        #expect(statements.count == 3)
        #expect(statements[1].hasPrefix("CREATE FUNCTION") && statements[1].hasSuffix("$$;"))
        #expect(PostgresBackend.statements(PostgresMigrations.all[0].sql).count > 20)
    }
}
