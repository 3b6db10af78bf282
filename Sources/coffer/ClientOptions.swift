import ArgumentParser
import CofferClient
import Foundation

/// How `coffer admin` and `coffer audit` reach a running server. The key comes from the
/// `COFFER_KEY` environment variable or a file, never from an argument (shell history, `ps`).
struct ClientOptions: ParsableArguments {
    @Option(help: "The server's base URL (or COFFER_SERVER; default http://127.0.0.1:8080).") var server: String?
    @Option(name: .customLong("key-file"), help: "A file holding the API key (or COFFER_KEY). A key is never an argument.")
    var keyFile: String?

    var serverURL: String { server ?? ProcessInfo.processInfo.environment["COFFER_SERVER"] ?? "http://127.0.0.1:8080" }

    func key() throws -> String {
        if let keyFile {
            try ContentSync.requireRegularFile(keyFile)
            let text = String(decoding: try IO.read(keyFile), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            guard !text.isEmpty else { throw UsageError("--key-file \(keyFile) is empty") }
            return text
        }
        guard let key = ProcessInfo.processInfo.environment["COFFER_KEY"], !key.isEmpty else {
            throw UsageError("no API key: set COFFER_KEY or pass --key-file FILE (coffer keys create prints one)")
        }
        return key.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Runs `body` with a client; a refused request prints one line with its code and exits 1,
    /// an unreachable server or a local problem exits 2.
    func run<T: Sendable>(_ body: (CofferAPIClient) async throws -> T) async throws -> T {
        let key = try key()
        do { return try await CofferAPIClient.withClient(server: serverURL, key: key, body) } catch let error as ClientError {
            FileHandle.standardError.write(Data("coffer: \(error)\n".utf8))
            if case .problem = error { throw ExitCode(1) }
            throw ExitCode(2)
        }
    }
}

/// How a listing is printed: a table on a terminal, JSON otherwise or with --json.
struct OutputOptions: ParsableArguments {
    @Flag(help: "Print JSON (the default when standard output is not a terminal).") var json = false
    @Flag(help: "Print a table (the default on a terminal).") var table = false

    var asJSON: Bool { json || (!table && isatty(1) != 1) }
}

/// A JSON value, for listings printed as they came (tables pick fields by name).
enum JSONValue: Codable, Sendable {
    case string(String), number(Double), bool(Bool), null, array([JSONValue]), object([String: JSONValue])

    init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() {
            self = .null
        } else if let b = try? c.decode(Bool.self) {
            self = .bool(b)
        } else if let n = try? c.decode(Double.self) {
            self = .number(n)
        } else if let s = try? c.decode(String.self) {
            self = .string(s)
        } else if let a = try? c.decode([JSONValue].self) {
            self = .array(a)
        } else {
            self = .object(try c.decode([String: JSONValue].self))
        }
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .string(let s): try c.encode(s)
        case .number(let n): if n == n.rounded(), abs(n) < 1e15 { try c.encode(Int64(n)) } else { try c.encode(n) }
        case .bool(let b): try c.encode(b)
        case .null: try c.encodeNil()
        case .array(let a): try c.encode(a)
        case .object(let o): try c.encode(o)
        }
    }

    subscript(key: String) -> JSONValue? {
        if case .object(let o) = self { return o[key] }
        return nil
    }

    var text: String {
        switch self {
        case .string(let s): s
        case .number(let n): n == n.rounded() && abs(n) < 1e15 ? String(Int64(n)) : String(n)
        case .bool(let b): b ? "yes" : "no"
        case .null: ""
        case .array(let a): a.map(\.text).joined(separator: ",")
        case .object: "{…}"
        }
    }
}

/// Columns of JSON objects as an aligned text table.
enum Table {
    static func render(_ items: [JSONValue], columns: [(header: String, key: String)], width: Int = 48) -> String {
        let rows = items.map { item in columns.map { cell(item[$0.key]?.text ?? "", width: width) } }
        var widths = columns.map { $0.header.count }
        for row in rows { for (i, cell) in row.enumerated() { widths[i] = max(widths[i], cell.count) } }
        func line(_ cells: [String]) -> String {
            cells.enumerated().map { i, c in i == cells.count - 1 ? c : c.padding(toLength: widths[i], withPad: " ", startingAt: 0) }
                .joined(separator: "  ")
        }
        return ([line(columns.map(\.header))] + rows.map(line)).joined(separator: "\n")
    }

    /// One line per row, nothing that moves the cursor or reorders text (``Terminal/safe(_:)``), at most `width` characters.
    static func cell(_ text: String, width: Int) -> String {
        let clean = Terminal.safe(text)
        return clean.count > width ? String(clean.prefix(width - 1)) + "…" : clean
    }

    /// A JSON answer's objects (an array, or a page's `items`) and its `nextCursor`.
    static func page(_ data: Data) throws -> (items: [JSONValue], next: String?) {
        let value: JSONValue
        do { value = try JSONDecoder().decode(JSONValue.self, from: data) } catch {
            throw ClientError.transport("the server's answer is not JSON")
        }
        if case .array(let items) = value { return (items, nil) }
        guard case .array(let items)? = value["items"] else { throw ClientError.transport("the server's answer is not a list") }
        if case .string(let next)? = value["nextCursor"] { return (items, next) }
        return (items, nil)
    }

    static func json(_ value: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Terminal.safeJSON(String(decoding: try encoder.encode(value), as: UTF8.self))
    }
}
