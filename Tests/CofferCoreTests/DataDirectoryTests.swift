import CofferCore
import Testing

/// Every path in the data directory comes from ``DataDirectory``: the layout the README and
/// the deployment notes describe.
struct DataDirectoryTests {
    @Test func namesEveryPathUnderItsRoot() {
        let data = DataDirectory("/srv/coffer")
        #expect(data.path == "/srv/coffer")
        #expect(data.database == "/srv/coffer/coffer.sqlite")
        #expect(data.content == "/srv/coffer/content")
        #expect(data.keys == "/srv/coffer/keys")
        #expect(data.tokenKeys == "/srv/coffer/keys/download-tokens.json")
        #expect(data.ledgerKey == "/srv/coffer/keys/ledger-signing.key")
        #expect(data.sandbox.path == "/srv/coffer/sandbox")
        #expect(data.sandbox.demoKeys == "/srv/coffer/sandbox/demo-keys.json")
        #expect(data.sandbox.file("root.pem") == "/srv/coffer/sandbox/root.pem")
        #expect(DataDirectory.ledgerKey(inCredentials: "/run/credentials/coffer.service") == "/run/credentials/coffer.service/ledger-signing.key")
    }

    /// Joined as Foundation joins path components, as the paths were before: a relative root
    /// stays relative, a trailing `/` is not doubled.
    @Test(arguments: [("coffer-data", "coffer-data/coffer.sqlite"), ("data/", "data/coffer.sqlite"), ("/", "/coffer.sqlite")])
    func joinsLikeFoundation(root: String, database: String) {
        #expect(DataDirectory(root).database == database)
    }
}
