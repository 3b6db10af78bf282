import Foundation
import NIOSSL
import PostgresNIO

/// A PostgreSQL connection URL, `postgres://USER[:PASS]@HOST[:PORT]/DB[?sslmode=…&sslrootcert=FILE]`
/// (libpq's form; `postgresql://` too). Its ``description`` never shows the password.
public struct PostgresURL: Sendable, Hashable, CustomStringConvertible {
    /// libpq's `sslmode` values this client supports.
    public enum SSLMode: String, Sendable, Hashable, CaseIterable {
        /// No TLS.
        case disable
        /// TLS when the server offers it, certificate not checked (libpq's default).
        case prefer
        /// TLS required, certificate not checked (checked like `verify-ca` when `sslrootcert` is given, as libpq does).
        case require
        /// TLS required, the certificate chain checked against `sslrootcert` (required: against
        /// the system's roots, with no host name checked, anyone holding a certificate from a
        /// public authority could pose as the server), not the host name.
        case verifyCA = "verify-ca"
        /// TLS required, the chain and the host name checked: what a database on another machine needs.
        case verifyFull = "verify-full"
    }

    public var user: String
    public var password: String?
    public var host: String
    public var port: Int
    public var database: String
    public var sslMode: SSLMode
    /// A PEM file of the certificate authorities to trust (`sslrootcert`).
    public var rootCertificate: String?
    /// A directory holding the server's Unix socket (`?host=/run/postgresql`), used instead of TCP.
    public var socketDirectory: String?

    /// Parses `text`; throws ``PostgresURLError`` naming what is wrong (never echoing a password).
    public init(_ text: String) throws(PostgresURLError) {
        guard let components = URLComponents(string: text), let scheme = components.scheme else { throw .notAURL }
        guard scheme == "postgres" || scheme == "postgresql" else { throw .scheme(scheme) }
        guard let user = components.user, !user.isEmpty else { throw .missing("a user name (postgres://USER@HOST/DB)") }
        // An IPv6 literal without its brackets, as the resolver takes it (`[::1]` → `::1`).
        var host = components.host ?? ""
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        let database = String(components.path.drop(while: { $0 == "/" }))
        guard !database.isEmpty, !database.contains("/") else { throw .missing("a database name (postgres://USER@HOST/DB)") }
        self.user = user
        self.password = components.password
        self.host = host
        self.port = components.port ?? 5432
        self.database = database
        self.sslMode = .prefer
        var seen: Set<String> = []
        for item in components.queryItems ?? [] {
            // libpq lets the last one win: `?sslmode=verify-full&sslmode=disable` would be plain text.
            guard seen.insert(item.name).inserted else { throw .repeated(item.name) }
            switch item.name {
            case "sslmode":
                guard let mode = item.value.flatMap(SSLMode.init(rawValue:)) else { throw .sslMode(item.value ?? "") }
                sslMode = mode
            case "sslrootcert":
                guard let file = item.value, !file.isEmpty else { throw .empty(item.name) }
                rootCertificate = file
            case "host":
                // libpq's host= is a socket directory when it starts with a slash; a TCP host
                // belongs in the URL's authority here.
                guard let directory = item.value, directory.hasPrefix("/") else { throw .socketDirectory(item.value ?? "") }
                socketDirectory = directory
            default: throw .parameter(item.name)
            }
        }
        if sslMode == .verifyCA && rootCertificate == nil {
            throw .missing("sslrootcert=FILE, which sslmode=verify-ca checks the server's certificate against")
        }
        guard !host.isEmpty || socketDirectory != nil else { throw .missing("a host (postgres://USER@HOST/DB)") }
        guard (1...65535).contains(port) else { throw .port(port) }
    }

    /// The URL with the password replaced by `***`.
    public var description: String {
        let authority = host.contains(":") ? "[\(host)]" : host
        var text = "postgres://\(user)\(password == nil ? "" : ":***")@\(authority):\(port)/\(database)?sslmode=\(sslMode.rawValue)"
        if let rootCertificate { text += "&sslrootcert=\(rootCertificate)" }
        if let socketDirectory { text += "&host=\(socketDirectory)" }
        return text
    }

    /// Whether the server is on this machine (loopback or a Unix socket): plain connections are then fine.
    public var isLocal: Bool { socketDirectory != nil || ["localhost", "127.0.0.1", "::1"].contains(host) }

    /// The client configuration: TLS per ``sslMode``, `poolSize` connections at most.
    /// `timeouts`: statements, lock waits and idle transactions are cut off (the server's
    /// requests); tools that read a whole ledger pass false (only an idle transaction is cut off). `name`: the `application_name`
    /// the server shows (`coffer` or `coffer-cli` by default). `keep`: connections kept open
    /// however long they sit idle (the driver closes others after `idle`, 60 s unless a test
    /// shortens it). `statementTimeout`: with `timeouts`, the sessions' `statement_timeout`.
    func clientConfiguration(
        poolSize: Int, timeouts: Bool = true, name: String? = nil, keep: Int = 0, idle: Duration = .seconds(60),
        statementTimeout: Duration = PostgresBackend.statementTimeout
    ) throws -> PostgresClient.Configuration {
        var configuration: PostgresClient.Configuration
        if let socketDirectory {
            configuration = .init(
                unixSocketPath: socketDirectory + "/.s.PGSQL.\(port)", username: user, password: password, database: database)
        } else {
            configuration = .init(host: host, port: port, username: user, password: password, database: database, tls: try tls())
        }
        configuration.options.maximumConnections = max(1, poolSize)
        configuration.options.minimumConnections = min(keep, max(1, poolSize))
        configuration.options.connectionIdleTimeout = idle
        configuration.options.connectTimeout = .seconds(5)
        // Off: its ping, written without a check, may go to a session the server just ended
        // and never be answered; the backend pings the writer's kept session itself
        // (`PostgresBackend.keepAlive`), and the shared ones close after `idle`.
        configuration.options.keepAliveBehavior = nil
        // Whole milliseconds (PostgreSQL before 12 refuses a fraction in an integer setting), 1 at
        // least (0 would turn the timeout off).
        let milliseconds = max(1, statementTimeout.components.seconds * 1000 + statementTimeout.components.attoseconds / 1_000_000_000_000_000)
        // A statement or lock wait that takes this long is a stuck database: the request gets
        // a 503 instead of holding its client (and the chain's lock) forever.
        configuration.options.additionalStartupParameters =
            timeouts
            ? [
                ("statement_timeout", "\(milliseconds)ms"), ("lock_timeout", "10s"),
                ("idle_in_transaction_session_timeout", "30s"),
                // The writer reads outside a transaction block (PostgresChain.take): its reads
                // must see the commits made before its lock, whatever the role's default.
                ("default_transaction_isolation", "read committed"),
                ("application_name", name ?? "coffer"),
            ]
            // The tools: no statement timeout (a copy or a verify may run long), but a session
            // idle inside a transaction (a tool suspended, or its host cut off, while holding the
            // chain's lock — every instance's appends 503 until then) ends within a minute.
            : [("idle_in_transaction_session_timeout", "60s"), ("application_name", name ?? "coffer-cli")]
        return configuration
    }

    private func tls() throws -> PostgresClient.Configuration.TLS {
        var tls = TLSConfiguration.makeClientConfiguration()
        if let rootCertificate {
            do { tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(rootCertificate)) } catch {
                throw PostgresURLError.rootCertificate(rootCertificate, "\(error)")
            }
        }
        switch sslMode {
        case .disable: return .disable
        case .prefer:
            tls.certificateVerification = .none
            return .prefer(tls)
        case .require:
            tls.certificateVerification = rootCertificate == nil ? .none : .noHostnameVerification
            return .require(tls)
        case .verifyCA:
            tls.certificateVerification = .noHostnameVerification
            return .require(tls)
        case .verifyFull:
            tls.certificateVerification = .fullVerification
            return .require(tls)
        }
    }
}

/// What is wrong with a PostgreSQL URL.
public enum PostgresURLError: Error, Sendable, Hashable, CustomStringConvertible {
    case notAURL
    case scheme(String)
    case missing(String)
    case sslMode(String)
    case parameter(String)
    case port(Int)
    case rootCertificate(String, String)
    case empty(String)
    case socketDirectory(String)
    case repeated(String)

    public var description: String {
        switch self {
        case .notAURL: "not a URL (expected postgres://USER[:PASS]@HOST[:PORT]/DB[?sslmode=…])"
        case .scheme(let scheme): "scheme '\(scheme)' is not postgres:// or postgresql://"
        case .missing(let what): "the URL lacks \(what)"
        case .sslMode(let mode):
            "sslmode '\(mode)' is not one of \(PostgresURL.SSLMode.allCases.map(\.rawValue).joined(separator: ", "))"
        case .parameter(let name): "unsupported URL parameter '\(name)' (supported: sslmode, sslrootcert, host)"
        case .port(let port): "port \(port) is out of range"
        case .rootCertificate(let path, let error): "sslrootcert \(path): \(error)"
        case .empty(let name): "URL parameter '\(name)' is empty"
        case .repeated(let name): "URL parameter '\(name)' is given more than once"
        case .socketDirectory(let value):
            "host=\(value) is not a socket directory (an absolute path such as /run/postgresql); give a TCP host as postgres://USER@HOST/DB"
        }
    }
}
