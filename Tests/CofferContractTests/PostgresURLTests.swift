import CofferPostgres
import Testing

/// `--database` URLs: libpq's form, what each part means, and every way one is refused —
/// named, never echoing a password, and never a silent downgrade of what was asked.
@Suite struct PostgresURLTests {
    @Test func partsAndDefaults() throws {
        let url = try PostgresURL("postgres://coffer_app:s3cr%2Ft@db.example.com:5433/coffer?sslmode=verify-full&sslrootcert=/etc/coffer/ca.pem")
        #expect(url.user == "coffer_app" && url.password == "s3cr/t" && url.host == "db.example.com" && url.port == 5433)
        #expect(url.database == "coffer" && url.sslMode == .verifyFull && url.rootCertificate == "/etc/coffer/ca.pem")
        #expect(!url.isLocal)
        #expect("\(url)" == "postgres://coffer_app:***@db.example.com:5433/coffer?sslmode=verify-full&sslrootcert=/etc/coffer/ca.pem")
        let plain = try PostgresURL("postgresql://u@localhost/d")
        #expect(plain.port == 5432 && plain.sslMode == .prefer && plain.password == nil && plain.isLocal)
        let socket = try PostgresURL("postgres://u@/d?host=/run/postgresql")
        #expect(socket.socketDirectory == "/run/postgresql" && socket.isLocal)
    }

    @Test("an IPv6 literal loses its brackets for the resolver and gets them back in the description")
    func ipv6() throws {
        let loopback = try PostgresURL("postgres://u@[::1]:5433/d?sslmode=disable")
        #expect(loopback.host == "::1" && loopback.port == 5433 && loopback.isLocal)
        #expect("\(loopback)" == "postgres://u@[::1]:5433/d?sslmode=disable")
        let remote = try PostgresURL("postgres://u@[2001:db8::5]/d")
        #expect(remote.host == "2001:db8::5" && !remote.isLocal)
    }

    @Test func refusedByName() {
        let cases: [(String, PostgresURLError)] = [
            ("not a url", .notAURL),
            ("mysql://u@h/d", .scheme("mysql")),
            ("postgres://h/d", .missing("a user name (postgres://USER@HOST/DB)")),
            ("postgres://u@h/", .missing("a database name (postgres://USER@HOST/DB)")),
            ("postgres://u@h/d?sslmode=allow", .sslMode("allow")),
            ("postgres://u@h/d?connect_timeout=3", .parameter("connect_timeout")),
            ("postgres://u@h:0/d", .port(0)),
            ("postgres://u@h/d?sslrootcert=", .empty("sslrootcert")),
            // libpq's TCP form of host= would be taken for a socket directory.
            ("postgres://u@h/d?host=10.0.0.5", .socketDirectory("10.0.0.5")),
            // Against the system's roots with no host name checked, any certificate from a
            // public authority would do: verify-ca names its authority.
            ("postgres://u@h/d?sslmode=verify-ca", .missing("sslrootcert=FILE, which sslmode=verify-ca checks the server's certificate against")),
            // The last would win, as in libpq: a verified connection quietly made plain text.
            ("postgres://u@h/d?sslmode=verify-full&sslmode=disable", .repeated("sslmode")),
            ("postgres://u@h/d?sslrootcert=/a.pem&sslmode=verify-ca&sslrootcert=/b.pem", .repeated("sslrootcert")),
        ]
        for (text, expected) in cases {
            #expect(throws: expected, "\(text)") { try PostgresURL(text) }
        }
        #expect(throws: PostgresURLError.self) { try PostgresURL("postgres://u:hunter2@h/d?sslmode=bogus") }
        do {
            _ = try PostgresURL("postgres://u:hunter2@h/d?sslmode=bogus")
        } catch {
            #expect(!"\(error)".contains("hunter2"))
        }
        #expect(throws: Never.self) { try PostgresURL("postgres://u@h/d?sslmode=verify-ca&sslrootcert=/etc/ca.pem") }
    }
}
