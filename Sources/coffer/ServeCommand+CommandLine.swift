import CofferServer
import Configuration

extension ServeCommand {
    /// The flags that were given, under their settings' keys: the top provider of the
    /// configuration reader (``CofferServer/CofferConfiguration/reader(commandLine:environment:)``).
    ///
    /// ArgumentParser still parses the command line: it has the subcommands, `--help`, typed
    /// values and usage errors, and `--demo`, `--content` and `--print-config`, which are not
    /// settings. swift-configuration's `CommandLineArgumentsProvider` has none of these (nor a
    /// repeated singular flag such as `--bundle-id` for `bundleIds`), so the parsed values are
    /// handed over in memory instead — as its guide to Swift Argument Parser recommends. A flag
    /// not given, or a repeatable flag given no times, is absent: the environment and the
    /// config file show through.
    var commandLine: InMemoryProvider {
        let strings: [(CofferSetting, String?)] = [
            (.host, host), (.dataDirectory, dataDir), (.config, config), (.logLevel, logLevel), (.accelRedirect, accelRedirect),
            (.ledgerKey, ledgerKey), (.database, database), (.contentStore, contentStore), (.s3Endpoint, s3Endpoint), (.s3Region, s3Region),
            (.downloadMode, downloadMode), (.playerIssuer, playerIssuer), (.playerAudience, playerAudience),
            (.playerAccountClaim, playerAccountClaim), (.partialRefunds, partialRefunds), (.legacyReceipts, legacyReceipts),
        ]
        let integers: [(CofferSetting, Int?)] = [
            (.port, port), (.appAppleId, appAppleId), (.tokenTTL, tokenTTL), (.uploadLimit, uploadLimit), (.rateRedemptions, rateRedemptions),
            (.rateRedemptionBurst, rateRedemptionBurst), (.rateAuthFailures, rateAuthFailures), (.rateRecordedRefusals, rateRecordedRefusals),
            (.rateNotifications, rateNotifications),
            (.rateNotificationBurst, rateNotificationBurst), (.downloadStallTimeout, downloadStallTimeout),
            (.downloadsPerAddress, downloadsPerAddress), (.bodyBudget, bodyBudget), (.checkpointEvery, checkpointEvery),
            (.checkpointInterval, checkpointInterval), (.databasePoolSize, databasePoolSize), (.auditConcurrency, auditConcurrency),
            (.eventLoops, eventLoops),
            (.s3PartSize, s3PartSize),
            (.contentCacheSize, contentCacheSize),
        ]
        let lists: [(CofferSetting, [String])] = [
            (.bundleIds, bundleIds), (.roots, trust.roots), (.environments, trust.environments), (.trustedProxies, trustedProxies),
            (.playerKeys, playerKeys),
        ]
        let given =
            strings.compactMap { setting, value in value.map { (setting, ConfigContent.string($0)) } }
            + integers.compactMap { setting, value in value.map { (setting, ConfigContent.int($0)) } }
            + lists.compactMap { setting, value in value.isEmpty ? nil : (setting, ConfigContent.stringArray(value)) }
        return InMemoryProvider(
            name: "command line",
            values: Dictionary(uniqueKeysWithValues: given.map { (AbsoluteConfigKey([$0.key]), ConfigValue($1, isSecret: false)) }))
    }
}
