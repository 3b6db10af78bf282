import ArgumentParser
import CofferCore
import CofferSandbox
import Foundation

struct SandboxCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sandbox",
        abstract: "Coffer's own StoreKit testing CA: mint receipts, transactions and notifications.",
        discussion: """
            Sandbox data is trusted only where its root is configured: `--root DIR/root.cer` vouches for LocalTesting \
            data only. Data minted with --environment Sandbox or Xcode needs the root scoped to it \
            (--root Sandbox=DIR/root.cer); Production never.
            """,
        subcommands: [Init.self, Receipt.self, Transaction.self, Notification.self])

    static func load(_ dir: String) throws -> SandboxCA {
        do {
            return try SandboxCA.load { name in try IO.read(SandboxDirectory(dir).file(name)) }
        } catch let error as SandboxCA.LoadError {
            throw UsageError(
                "\(error.description): no sandbox CA in \(dir). The demo's is DATA/sandbox (coffer-data/sandbox after `coffer serve --demo`); "
                    + "a new CA from `coffer sandbox init` is trusted by no server until it is passed as --root")
        }
    }

    static func environment(_ value: String) throws -> Environment {
        guard let env = Environment.allCases.first(where: { $0.rawValue.lowercased() == value.lowercased() }) else {
            throw UsageError("--environment: '\(value)' is not one of Production, Sandbox, Xcode, LocalTesting")
        }
        return env
    }

    struct Init: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a sandbox CA (root, intermediate, receipt and JWS signing leaves) in a directory.")

        @Option(help: "Directory to create the CA in.")
        var dir: String

        @Flag(help: "Replace an existing CA in the directory.")
        var force = false

        func run() async throws {
            let fm = FileManager.default
            let directory = SandboxDirectory(dir)
            let rootPath = directory.file(SandboxCA.FileName.root)
            if fm.fileExists(atPath: rootPath) && !force {
                throw UsageError("\(dir) already holds a sandbox CA (use --force to replace it)")
            }
            do {
                try fm.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch {
                throw UsageError("cannot create \(dir): \(error.localizedDescription)")
            }
            let ca = try SandboxCA.create(now: Date())
            for (name, bytes) in try ca.files() {
                try IO.write(bytes, to: directory.file(name), mode: name.hasSuffix("key.pem") ? 0o600 : 0o644)
            }
            let root = directory.file(SandboxCA.FileName.rootDER)
            print("sandbox CA created in \(dir)")
            print("trust it for LocalTesting data with: --root \(root) --environment LocalTesting")
            print("(data minted with --environment Sandbox needs --root Sandbox=\(root); Production is never accepted from it)")
        }
    }

    struct Receipt: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Mint a legacy (PKCS#7) app receipt signed by the sandbox CA.",
            discussion: "Writes DER to standard output unless --out or --out-dir is given.")

        @Option(help: "Sandbox CA directory.") var dir: String
        @Option(name: .customLong("bundle-id")) var bundleId: String
        @Option(name: .customLong("purchase"), help: "PRODUCT:TRANSACTION_ID. Repeatable.") var purchases: [String] = []
        @Option(name: .customLong("app-version")) var appVersion = "1.0"
        @Option(name: .customLong("purchase-date"), help: "ISO 8601; default now.") var purchaseDate: String?
        @Option(name: .customLong("cancellation-date"), help: "ISO 8601; marks every purchase as cancelled (refunded).") var cancellationDate: String?
        @Option(name: .customLong("creation-date"), help: "ISO 8601 receipt creation date; default now.") var creationDate: String?
        @Option(help: "Production, Sandbox, Xcode or LocalTesting.") var environment = "LocalTesting"
        @Flag(help: "BER with indefinite lengths and a chunked content OCTET STRING, like Xcode.") var ber = false
        @Option(help: "sha1 or sha256.") var digest = "sha256"
        @Option(name: .customLong("device-id"), help: "Device UUID to bind the receipt hash to.") var deviceId: String?
        @Option(help: "Write the receipt to this file.") var out: String?
        @Option(help: "Mint this many receipts, with consecutive transaction ids, one per purchase.") var count = 1
        @Option(name: .customLong("out-dir"), help: "With --count: write DIR/<transactionId>.der.") var outDir: String?
        @Flag(help: "Print base64 instead of DER.") var base64 = false

        func validate() throws {
            guard !purchases.isEmpty else { throw ValidationError("at least one --purchase PRODUCT:TRANSACTION_ID is required") }
            guard count >= 1, count <= 1_000_000 else { throw ValidationError("--count must be between 1 and 1000000") }
            if count > 1 && outDir == nil { throw ValidationError("--count above 1 needs --out-dir") }
            guard ["sha1", "sha256"].contains(digest) else { throw ValidationError("--digest must be sha1 or sha256") }
        }

        func run() async throws {
            let ca = try SandboxCommand.load(dir)
            let now = Date()
            var base = ReceiptSpec(bundleId: bundleId, purchases: [])
            base.appVersion = appVersion
            base.environment = try SandboxCommand.environment(environment)
            base.creationDate = try IO.date(creationDate, "--creation-date")
            if let deviceId {
                guard let uuid = UUID(uuidString: deviceId) else { throw UsageError("--device-id: '\(deviceId)' is not a UUID") }
                base.deviceIdentifier = withUnsafeBytes(of: uuid.uuid) { Array($0) }
            }
            let purchased = try IO.date(purchaseDate, "--purchase-date")
            let cancelled = try IO.date(cancellationDate, "--cancellation-date")
            let parsed = try purchases.map { value -> PurchaseSpec in
                let parts = value.split(separator: ":", maxSplits: 1).map(String.init)
                guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else {
                    throw UsageError("--purchase: '\(value)' is not PRODUCT:TRANSACTION_ID")
                }
                var p = PurchaseSpec(productId: parts[0], transactionId: parts[1])
                p.purchaseDate = purchased
                p.cancellationDate = cancelled
                return p
            }
            var encoding = ReceiptEncoding()
            encoding.ber = ber
            encoding.digest = digest == "sha1" ? .sha1 : .sha256

            if let outDir {
                try FileManager.default.createDirectory(atPath: outDir, withIntermediateDirectories: true)
                for i in 0..<count {
                    var spec = base
                    spec.purchases = try parsed.map { p in
                        var p = p
                        p.transactionId = try Self.offset(p.transactionId, by: i)
                        return p
                    }
                    let der = try ca.mintReceipt(spec, now: now, encoding: encoding)
                    let name = spec.purchases[0].transactionId
                    try IO.write(
                        base64 ? Array(Data(der).base64EncodedString().utf8) : der, to: (outDir as NSString).appendingPathComponent("\(name).der"))
                }
                print("wrote \(count) receipt(s) to \(outDir)")
                return
            }
            var spec = base
            spec.purchases = parsed
            let der = try ca.mintReceipt(spec, now: now, encoding: encoding)
            try IO.output(base64 ? Array((Data(der).base64EncodedString() + (out == nil ? "\n" : "")).utf8) : der, to: out)
        }

        /// `transactionId + i` for numeric ids.
        static func offset(_ id: String, by i: Int) throws -> String {
            if i == 0 { return id }
            guard let n = Int(id), n <= Int.max - i else { throw UsageError("--count needs numeric transaction ids, got '\(id)'") }
            return String(n + i)
        }
    }

    /// What a minted transaction says beyond its ids (transactions and notifications).
    struct TransactionOptions: ParsableArguments {
        @Option(name: .customLong("bundle-id")) var bundleId: String
        @Option var product: String
        @Option(name: .customLong("transaction-id")) var transactionId: String
        @Option(name: .customLong("original-transaction-id"), help: "Default: the transaction id (a renewal names its first transaction).")
        var originalTransactionId: String?
        @Option(name: .customLong("product-type"), help: "consumable, nonConsumable, autoRenewable or nonRenewing.")
        var productType = "nonConsumable"
        @Option(name: .customLong("purchase-date"), help: "ISO 8601; default now.") var purchaseDate: String?
        @Option(name: .customLong("expires"), help: "ISO 8601 expiresDate (subscriptions).") var expires: String?
        @Option(name: .customLong("expires-in"), help: "expiresDate as seconds from now (subscriptions; negative: already lapsed).")
        var expiresIn: Int?
        @Option(name: .customLong("revocation-date"), help: "ISO 8601: the purchase was refunded or revoked.") var revocationDate: String?
        @Option(name: .customLong("app-account-token")) var appAccountToken: String?
        @Option(help: "PURCHASED or FAMILY_SHARED (inAppOwnershipType).") var ownership = "PURCHASED"
        @Flag(help: "The subscription transaction was upgraded (isUpgraded).") var upgraded = false
        @Option(help: "Production, Sandbox, Xcode or LocalTesting.") var environment = "LocalTesting"

        static let appleTypes = [
            "consumable": "Consumable", "nonConsumable": "Non-Consumable", "autoRenewable": "Auto-Renewable Subscription",
            "nonRenewing": "Non-Renewing Subscription",
        ]

        func spec(now: Date) throws -> TransactionSpec {
            guard let type = Self.appleTypes[productType] else {
                throw UsageError("--product-type must be consumable, nonConsumable, autoRenewable or nonRenewing")
            }
            guard ["PURCHASED", "FAMILY_SHARED"].contains(ownership) else { throw UsageError("--ownership must be PURCHASED or FAMILY_SHARED") }
            var spec = TransactionSpec(bundleId: bundleId, productId: product, transactionId: transactionId)
            spec.type = type
            spec.originalTransactionId = originalTransactionId
            spec.purchaseDate = try IO.date(purchaseDate, "--purchase-date")
            spec.expiresDate = try IO.date(expires, "--expires") ?? expiresIn.map { now.addingTimeInterval(TimeInterval($0)) }
            if productType == "autoRenewable" && spec.expiresDate == nil {
                throw UsageError("an autoRenewable transaction needs --expires or --expires-in")
            }
            spec.revocationDate = try IO.date(revocationDate, "--revocation-date")
            spec.environment = try SandboxCommand.environment(environment)
            spec.appAccountToken = appAccountToken
            spec.ownershipType = ownership
            spec.isUpgraded = upgraded
            return spec
        }
    }

    struct Transaction: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Mint a StoreKit 2 signed transaction (prints the compact JWS).")

        @Option(help: "Sandbox CA directory.") var dir: String
        @OptionGroup var transaction: TransactionOptions
        @Option(help: "Write the JWS to this file.") var out: String?

        func run() async throws {
            let ca = try SandboxCommand.load(dir)
            let now = Date()
            let jws = try ca.mintTransaction(try transaction.spec(now: now), now: now)
            try IO.output(Array((jws + (out == nil ? "\n" : "")).utf8), to: out)
        }
    }

    struct Notification: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Mint an App Store Server Notification V2 with a nested signed transaction (and renewal info for subscriptions).",
            discussion: """
                Types Coffer acts on: REFUND, REVOKE, REFUND_REVERSED, REFUND_DECLINED, SUBSCRIBED, DID_RENEW, DID_FAIL_TO_RENEW \
                (--subtype GRACE_PERIOD with --grace-period-in), GRACE_PERIOD_EXPIRED, EXPIRED (--subtype VOLUNTARY, BILLING_RETRY, …), \
                DID_CHANGE_RENEWAL_STATUS (--subtype AUTO_RENEW_ENABLED / AUTO_RENEW_DISABLED).
                """)

        @Option(help: "Sandbox CA directory.") var dir: String
        @Option(help: "REFUND, REVOKE, REFUND_REVERSED, DID_RENEW, …") var type: String
        @Option var subtype: String?
        @OptionGroup var transaction: TransactionOptions
        @Option(name: .customLong("grace-period-in"), help: "Renewal info's gracePeriodExpiresDate, seconds from now.") var gracePeriodIn: Int?
        @Flag(name: .customLong("billing-retry"), help: "Renewal info: isInBillingRetryPeriod.") var billingRetry = false
        @Flag(name: .customLong("auto-renew-off"), help: "Renewal info: autoRenewStatus 0.") var autoRenewOff = false
        @Option(name: .customLong("revocation-type"), help: "REFUND_FULL, REFUND_PRORATED or FAMILY_REVOKE.") var revocationType: String?
        @Option(name: .customLong("revocation-percentage"), help: "A prorated refund's share, thousandths of a percent (50000 = 50 %).")
        var revocationPercentage: Int?
        @Option(name: .customLong("notification-uuid"), help: "Default: a new UUID.") var notificationUUID: String?
        @Option(help: "Write the JWS to this file.") var out: String?

        func run() async throws {
            let ca = try SandboxCommand.load(dir)
            let now = Date()
            var spec = try transaction.spec(now: now)
            spec.revocationType = revocationType
            spec.revocationPercentage = revocationPercentage
            var renewal: RenewalSpec?
            if spec.expiresDate != nil || gracePeriodIn != nil || billingRetry || autoRenewOff {
                var r = RenewalSpec(productId: spec.productId, originalTransactionId: spec.originalTransactionId ?? spec.transactionId)
                r.environment = spec.environment
                r.renewalDate = spec.expiresDate
                r.gracePeriodExpiresDate = gracePeriodIn.map { now.addingTimeInterval(TimeInterval($0)) }
                r.isInBillingRetryPeriod = billingRetry
                r.autoRenew = !autoRenewOff
                renewal = r
            }
            let jws = try ca.mintNotification(
                type: type, subtype: subtype, transaction: spec, renewal: renewal, notificationUUID: notificationUUID, now: now)
            try IO.output(Array((jws + (out == nil ? "\n" : "")).utf8), to: out)
        }
    }
}
