import CofferCore
import Testing

/// The codes are API: clients branch on them, dashboards count them, the ledger stores them.
/// This table is written out by hand so that renaming a code, dropping one or moving it to
/// another status fails here.
@Suite("ProblemCode")
struct ProblemCodeTests {
    static let table: [(String, Int)] = [
        ("malformedRequest", 400),
        ("nonCanonicalPath", 400),
        ("invalidAssetId", 400),
        ("invalidAssetName", 400),
        ("invalidProductId", 400),
        ("digestMismatch", 400),
        ("payloadTooLarge", 413),
        ("requestTimeout", 408),
        ("rangeNotSatisfiable", 416),
        ("notFound", 404),
        ("methodNotAllowed", 405),
        ("httpError", 500),
        ("unauthenticated", 401),
        ("forbidden", 403),
        ("rateLimited", 429),
        ("tooManyDownloads", 429),
        ("malformed", 400),
        ("unsupportedFormat", 422),
        ("unsupportedAlgorithm", 422),
        ("limitExceeded", 400),
        ("certificateChainMissing", 422),
        ("chainLengthInvalid", 422),
        ("signerNotFound", 422),
        ("signatureInvalid", 422),
        ("chainUntrusted", 422),
        ("certificateExpired", 422),
        ("missingAppleExtension", 422),
        ("bundleMismatch", 422),
        ("appAppleIdMismatch", 422),
        ("environmentNotAllowed", 422),
        ("environmentMismatch", 422),
        ("deviceMismatch", 422),
        ("unknownProduct", 404),
        ("unknownAsset", 404),
        ("assetMissing", 404),
        ("productTypeMismatch", 422),
        ("expired", 422),
        ("appAccountTokenMismatch", 422),
        ("transactionNotInReceipt", 422),
        ("transactionRequired", 422),
        ("alreadyRedeemed", 409),
        ("revoked", 410),
        ("grantInvalid", 403),
        ("tokenExpired", 403),
        ("tokenInvalid", 403),
        ("notRedeemed", 404),
        ("alreadyRevoked", 409),
        ("ambiguousTransaction", 409),
        ("noCheckpoint", 404),
        ("playerTokenRequired", 401),
        ("playerTokenInvalid", 401),
        ("playerTokenRejected", 403),
        ("accountMismatch", 422),
        ("entitlementExpired", 403),
        ("familySharingNotAllowed", 403),
        ("upgradedTransaction", 409),
        ("legacyReceiptRefused", 422),
        ("storageUnavailable", 503),
        ("busy", 503),
        ("uploadsBusy", 503),
        ("auditBusy", 503),
        ("notReady", 503),
        ("ledgerSealBroken", 503),
        ("contentStoreUnavailable", 503),
        ("contentStoreError", 502),
        ("internalError", 500),
    ]

    @Test func everyCodeHasItsStatusAndItsName() {
        #expect(ProblemCode.allCases.map(\.rawValue) == Self.table.map(\.0))
        for (name, status) in Self.table {
            let code = ProblemCode(rawValue: name)
            #expect(code?.status == status, "\(name)")
        }
    }

    @Test func statusesAreClientOrServerErrorsOnly() {
        for code in ProblemCode.allCases {
            #expect((400...599).contains(code.status), "\(code.rawValue)")
        }
        // The server's own state is 503 (with Retry-After); nothing else is.
        let unavailable = ProblemCode.allCases.filter { $0.status == 503 }
        #expect(Set(unavailable) == [.storageUnavailable, .busy, .uploadsBusy, .auditBusy, .notReady, .ledgerSealBroken, .contentStoreUnavailable])
    }

    @Test func verificationCodesMapByName() {
        for code in [VerificationError.Code.malformed, .limitExceeded, .signatureInvalid, .chainUntrusted, .deviceMismatch] {
            #expect(ProblemCode(code).rawValue == code.rawValue)
        }
        #expect(VaultFailure.verification(VerificationError(.malformed, "x")).status == 400)
        #expect(VaultFailure.verification(VerificationError(.limitExceeded, "x")).status == 400)
        #expect(VaultFailure.verification(VerificationError(.signatureInvalid, "x")).status == 422)
        // The one code whose status depends on what it is about: a proof that verified but
        // lacks what a purchase needs is 422, an unreadable one 400.
        #expect(VaultFailure.incomplete("x").code == .malformed)
        #expect(VaultFailure.incomplete("x").status == 422)
    }
}
