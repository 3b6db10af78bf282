/// What an admin action did: the `action` of an ``AdminAction`` (stored and hashed as its raw
/// value, so raw values never change).
public enum AdminActionName: String, Sendable, Hashable, CaseIterable, Codable {
    case assetUpload = "asset.upload"
    case productPut = "product.put"
    case productDelete = "product.delete"
    case redemptionRevoke = "redemption.revoke"
    case keyCreate = "key.create"
    case keyRevoke = "key.revoke"
    /// `coffer ledger adopt`: rows chained on purpose (its detail says which, and any re-seal).
    case ledgerAdopt = "ledger.adopt"
    /// `coffer ledger adopt`: a logged asset version the catalogue no longer holds as logged
    /// (its detail is the upload's): the admin log stops expecting it.
    case assetForget = "asset.forget"
}
