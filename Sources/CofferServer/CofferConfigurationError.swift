/// A setting the operator must fix (a malformed number, a value out of range, an unknown key
/// in the config file, an unreadable trust root): `coffer` prints the description, which names
/// the setting, and exits with status 2.
public struct CofferConfigurationError: Error, CustomStringConvertible, Equatable {
    public var description: String

    public init(_ description: String) { self.description = description }
}
