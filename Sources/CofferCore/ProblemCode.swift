/// Every machine-readable `code` Coffer answers with (RFC 9457 problem bodies, refused
/// attempts in the ledger, metrics labels), and its HTTP status: one table. Raw values are
/// part of the API: never rename one.
public enum ProblemCode: String, Sendable, Hashable, CaseIterable, Codable {
    // The request itself.
    case malformedRequest, nonCanonicalPath, invalidAssetId, invalidAssetName, invalidProductId, digestMismatch
    case payloadTooLarge, requestTimeout, rangeNotSatisfiable, notFound, methodNotAllowed
    /// Any other error the HTTP framework raised (its own status is kept).
    case httpError
    // Who is asking.
    case unauthenticated, forbidden, rateLimited, tooManyDownloads
    // Verification (``VerificationError/Code``, same raw values).
    case malformed, unsupportedFormat, unsupportedAlgorithm, limitExceeded, certificateChainMissing, chainLengthInvalid
    case signerNotFound, signatureInvalid, chainUntrusted, certificateExpired, missingAppleExtension, bundleMismatch
    case appAppleIdMismatch, environmentNotAllowed, environmentMismatch, deviceMismatch
    // The vault's rules.
    case unknownProduct, unknownAsset, assetMissing, productTypeMismatch, expired, appAccountTokenMismatch
    case transactionNotInReceipt, transactionRequired, alreadyRedeemed, revoked, grantInvalid, tokenExpired, tokenInvalid
    case notRedeemed, alreadyRevoked, ambiguousTransaction, noCheckpoint
    // Players and entitlements.
    case playerTokenRequired, playerTokenInvalid, playerTokenRejected, accountMismatch, entitlementExpired, familySharingNotAllowed
    case upgradedTransaction, legacyReceiptRefused
    // The server's state: 503, always with `Retry-After`.
    case storageUnavailable, busy, uploadsBusy, auditBusy, notReady, ledgerSealBroken, contentStoreUnavailable
    // The object store behind the server refused or answered wrongly: 502.
    case contentStoreError
    case internalError

    /// The HTTP status of a problem with this code.
    public var status: Int {
        switch self {
        case .malformedRequest, .nonCanonicalPath, .invalidAssetId, .invalidAssetName, .invalidProductId, .digestMismatch, .malformed,
            .limitExceeded:
            400
        case .unauthenticated, .playerTokenRequired, .playerTokenInvalid: 401
        case .forbidden, .grantInvalid, .tokenExpired, .tokenInvalid, .playerTokenRejected, .entitlementExpired, .familySharingNotAllowed: 403
        case .notFound, .unknownProduct, .unknownAsset, .assetMissing, .notRedeemed, .noCheckpoint: 404
        case .methodNotAllowed: 405
        case .requestTimeout: 408
        case .alreadyRedeemed, .alreadyRevoked, .ambiguousTransaction, .upgradedTransaction: 409
        case .revoked: 410
        case .payloadTooLarge: 413
        case .rangeNotSatisfiable: 416
        case .unsupportedFormat, .unsupportedAlgorithm, .certificateChainMissing, .chainLengthInvalid, .signerNotFound, .signatureInvalid,
            .chainUntrusted, .certificateExpired, .missingAppleExtension, .bundleMismatch, .appAppleIdMismatch, .environmentNotAllowed,
            .environmentMismatch, .deviceMismatch, .productTypeMismatch, .expired, .appAccountTokenMismatch, .transactionNotInReceipt,
            .transactionRequired, .accountMismatch, .legacyReceiptRefused:
            422
        case .rateLimited, .tooManyDownloads: 429
        case .httpError, .internalError: 500
        case .contentStoreError: 502
        case .storageUnavailable, .busy, .uploadsBusy, .auditBusy, .notReady, .ledgerSealBroken, .contentStoreUnavailable: 503
        }
    }

    /// The code of a verification failure (same raw value).
    public init(_ code: VerificationError.Code) {
        switch code {
        case .malformed: self = .malformed
        case .unsupportedFormat: self = .unsupportedFormat
        case .unsupportedAlgorithm: self = .unsupportedAlgorithm
        case .limitExceeded: self = .limitExceeded
        case .certificateChainMissing: self = .certificateChainMissing
        case .chainLengthInvalid: self = .chainLengthInvalid
        case .signerNotFound: self = .signerNotFound
        case .signatureInvalid: self = .signatureInvalid
        case .chainUntrusted: self = .chainUntrusted
        case .certificateExpired: self = .certificateExpired
        case .missingAppleExtension: self = .missingAppleExtension
        case .bundleMismatch: self = .bundleMismatch
        case .appAppleIdMismatch: self = .appAppleIdMismatch
        case .environmentNotAllowed: self = .environmentNotAllowed
        case .environmentMismatch: self = .environmentMismatch
        case .deviceMismatch: self = .deviceMismatch
        }
    }
}
