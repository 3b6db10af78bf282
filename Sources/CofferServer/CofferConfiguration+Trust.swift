import CofferCore

extension CofferConfiguration {
    /// Sets ``anchors`` from the configured ``roots`` and ``environments`` (``TrustRoots``),
    /// after checking that some bundle id is configured: the server never starts in a mode
    /// that accepts any app's receipts. (`coffer serve --demo` trusts its sandbox CA instead.)
    public mutating func resolveTrustAnchors() throws {
        guard !bundleIds.isEmpty else {
            throw CofferConfigurationError(
                "no bundle id configured: pass --bundle-id, COFFER_BUNDLE_IDS or bundleIds in the config file (or use --demo)")
        }
        anchors = try TrustRoots.anchors(roots: roots, environments: environments)
    }
}
