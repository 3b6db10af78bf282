import Foundation

#if canImport(FoundationXML)
    import FoundationXML
#endif

/// One element of an S3 XML response: its name (namespace dropped), its text, its children.
/// Parsed with Foundation's `XMLParser` (libxml2); S3's answers are small (a list page is at
/// most 1,000 entries), and the parser is given at most ``S3Client/maxXMLBytes``.
struct S3XMLNode: Sendable {
    var name: String
    var text = ""
    var children: [S3XMLNode] = []

    /// The first child named `name`.
    func child(_ name: String) -> S3XMLNode? { children.first { $0.name == name } }
    /// Every child named `name`.
    func all(_ name: String) -> [S3XMLNode] { children.filter { $0.name == name } }
    /// The trimmed text of the first child named `name`.
    func value(_ name: String) -> String? { child(name).map { $0.text.trimmingCharacters(in: .whitespacesAndNewlines) } }

    /// The document's root element; nil when `data` is not well-formed XML. No external
    /// entities or DTDs are resolved.
    static func parse(_ data: Data) -> S3XMLNode? {
        let parser = XMLParser(data: data)
        parser.shouldResolveExternalEntities = false
        parser.shouldProcessNamespaces = true
        let builder = Builder()
        parser.delegate = builder
        guard parser.parse() else { return nil }
        return builder.root
    }

    private final class Builder: NSObject, XMLParserDelegate {
        var stack: [S3XMLNode] = []
        var root: S3XMLNode?

        func parser(
            _ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?, qualifiedName: String?,
            attributes: [String: String] = [:]
        ) {
            stack.append(S3XMLNode(name: elementName))
        }

        func parser(_ parser: XMLParser, foundCharacters string: String) {
            guard !stack.isEmpty else { return }
            stack[stack.count - 1].text += string
        }

        func parser(_ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName: String?) {
            guard let node = stack.popLast() else { return }
            if stack.isEmpty { root = node } else { stack[stack.count - 1].children.append(node) }
        }
    }
}
