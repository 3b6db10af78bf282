import Foundation
import Testing

@testable import CofferS3

/// ``SigV4Signer`` against the example signatures AWS documents for S3 ("Signature
/// Calculations for the Authorization Header: Transferring Payload in a Single Chunk" and
/// "Authenticating Requests: Using Query Parameters", Amazon S3 API Reference): the example
/// key pair, bucket `examplebucket`, us-east-1, 2013-05-24 00:00:00 UTC.
@Suite("SigV4: AWS's documented S3 examples")
struct SigV4Tests {
    static let signer = SigV4Signer(
        credentials: S3Credentials(accessKeyId: "AKIAIOSFODNN7EXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
        region: "us-east-1")
    static let date = Date(timeIntervalSince1970: 1_369_353_600)  // 20130524T000000Z
    static let host = ("Host", "examplebucket.s3.amazonaws.com")

    static func signature(of headers: [(String, String)]) -> String? {
        guard let authorization = headers.first(where: { $0.0 == "Authorization" })?.1,
            let range = authorization.range(of: "Signature=")
        else { return nil }
        return String(authorization[range.upperBound...])
    }

    @Test("GET Object with a Range: canonical request, string to sign, signature, Authorization")
    func getObject() throws {
        let headers = Self.signer.sign(
            method: "GET", path: "/test.txt", headers: [Self.host, ("Range", "bytes=0-9")], payloadSHA256: SigV4Signer.emptyPayload, date: Self.date)
        let canonical = SigV4Signer.canonicalRequest(
            method: "GET", path: "/test.txt", query: "",
            headers: SigV4Signer.canonicalHeaders([
                Self.host, ("Range", "bytes=0-9"), ("x-amz-content-sha256", SigV4Signer.emptyPayload), ("x-amz-date", "20130524T000000Z"),
            ]), payloadSHA256: SigV4Signer.emptyPayload)
        #expect(
            canonical == """
                GET
                /test.txt

                host:examplebucket.s3.amazonaws.com
                range:bytes=0-9
                x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
                x-amz-date:20130524T000000Z

                host;range;x-amz-content-sha256;x-amz-date
                e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
                """)
        #expect(
            Self.signer.stringToSign(canonical, stamp: SigV4Signer.Stamp(Self.date)) == """
                AWS4-HMAC-SHA256
                20130524T000000Z
                20130524/us-east-1/s3/aws4_request
                7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972
                """)
        #expect(Self.signature(of: headers) == "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
        #expect(
            headers.first { $0.0 == "Authorization" }?.1
                == "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        )
        #expect(headers.first { $0.0 == "x-amz-date" }?.1 == "20130524T000000Z")
    }

    @Test("PUT Object: a path with $, a Date header, a storage class, the body's hash")
    func putObject() {
        let body = "Welcome to Amazon S3."
        let payload = "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072"
        #expect(SigV4Signer.hexSHA256(Data(body.utf8)) == payload)
        let headers = Self.signer.sign(
            method: "PUT", path: "/test$file.text",
            headers: [Self.host, ("Date", "Fri, 24 May 2013 00:00:00 GMT"), ("x-amz-storage-class", "REDUCED_REDUNDANCY")],
            payloadSHA256: payload, date: Self.date)
        #expect(Self.signature(of: headers) == "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd")
    }

    @Test("GET Bucket lifecycle: a sub-resource with no value")
    func getLifecycle() {
        let headers = Self.signer.sign(
            method: "GET", path: "/", query: [("lifecycle", "")], headers: [Self.host], payloadSHA256: SigV4Signer.emptyPayload, date: Self.date)
        #expect(Self.signature(of: headers) == "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543")
    }

    @Test("GET Bucket (list objects): parameters sorted")
    func listObjects() {
        let headers = Self.signer.sign(
            method: "GET", path: "/", query: [("prefix", "J"), ("max-keys", "2")], headers: [Self.host], payloadSHA256: SigV4Signer.emptyPayload,
            date: Self.date)
        #expect(Self.signature(of: headers) == "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7")
    }

    @Test("a presigned GET valid 86,400 s")
    func presignedGet() {
        let query = Self.signer.presignedQuery(
            method: "GET", path: "/test.txt", host: "examplebucket.s3.amazonaws.com", expires: 86_400, date: Self.date)
        #expect(
            query
                == "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
        )
    }

    @Test("encoding: unreserved kept, everything else %XX of its UTF-8 bytes; / only in a path; header values trimmed")
    func encoding() {
        #expect(SigV4Signer.encode("a-b_c.d~e/f g+h=i&j*é", keepSlash: true) == "a-b_c.d~e/f%20g%2Bh%3Di%26j%2A%C3%A9")
        #expect(SigV4Signer.encode("a/b", keepSlash: false) == "a%2Fb")
        #expect(SigV4Signer.canonicalHeaders([("X-Odd", "  a   b  "), ("x-odd", "c")]).block == "x-odd:a b,c\n")
        #expect(SigV4Signer.canonicalQuery([("b", "2"), ("a", "2"), ("a", "1")]) == "a=1&a=2&b=2")
    }
}

/// A hostile endpoint's XML: a DTD is refused before libxml2 sees it, in UTF-16 too (a byte
/// search for `<!DOCTYPE` finds nothing there).
@Test func answersWithADTDOrNotInUTF8AreRefused() throws {
    let dtd = "<?xml version=\"1.0\"?><!DOCTYPE x [<!ENTITY a \"aaaa\">]><x>&a;</x>"
    let utf16: [UInt8] = [0xFF, 0xFE] + dtd.utf16.flatMap { [UInt8(truncatingIfNeeded: $0), UInt8(truncatingIfNeeded: $0 >> 8)] }
    let bodies: [[UInt8]] = [Array(dtd.utf8), utf16, Array("<x>\u{0}</x>".utf8), [0x3C, 0x78, 0xFF, 0x3E]]
    for body in bodies {
        #expect(throws: S3Error.self) { try S3Client.checkXML(body) }
    }
    try S3Client.checkXML(Array("<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult><Name>é</Name></ListBucketResult>".utf8))
}

/// Each streamed read holds one of the S3 client's connections for its whole length; a request
/// that finds them all leased waits. The pool keeps room beyond the streamed reads for size
/// checks, uploads and listings (with 64 connections and 256 reads, the 65th slow download
/// queued all of those until they failed their deadlines).
@Test func thePoolKeepsRoomBeyondTheStreamedReads() {
    #expect(S3Client.connectionLimit >= S3ContentStore.maxConcurrentReads + 64)
}
