-- 0001_initial: catalogue, replay ledger, rejected attempts and API keys.
-- Dates are REAL unix seconds (timeIntervalSince1970).

CREATE TABLE products (
    product_id TEXT PRIMARY KEY NOT NULL,
    bundle_id TEXT NOT NULL,
    type TEXT NOT NULL CHECK (type IN ('consumable', 'nonConsumable')),
    asset_ids TEXT NOT NULL CHECK (json_valid(asset_ids) AND json_type(asset_ids) = 'array'), -- JSON array of asset ids
    title TEXT NOT NULL,
    updated_at REAL NOT NULL
);

CREATE TABLE assets (
    asset_id TEXT NOT NULL,
    version INTEGER NOT NULL CHECK (version >= 1),
    name TEXT NOT NULL,
    content_type TEXT NOT NULL,
    size INTEGER NOT NULL CHECK (size >= 0),
    sha256 TEXT NOT NULL CHECK (length(sha256) = 64),
    created_at REAL NOT NULL,
    PRIMARY KEY (asset_id, version)
);

-- The replay guarantee: transaction_id is UNIQUE, so a second redemption of the
-- same transaction fails inside SQLite whatever the interleaving of requests.
CREATE TABLE redemptions (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    redemption_id TEXT NOT NULL UNIQUE,
    transaction_id TEXT NOT NULL UNIQUE,
    original_transaction_id TEXT,
    product_id TEXT NOT NULL,
    bundle_id TEXT NOT NULL,
    environment TEXT NOT NULL,
    purchase_date REAL,
    quantity INTEGER NOT NULL,
    receipt_sha256 TEXT NOT NULL,
    source_format TEXT NOT NULL CHECK (source_format IN ('appReceipt', 'signedTransaction')),
    redeemed_at REAL NOT NULL,
    client_address TEXT NOT NULL,
    app_account_token TEXT,
    status TEXT NOT NULL,
    grant_hash TEXT NOT NULL UNIQUE
);

CREATE INDEX redemptions_original_transaction_id ON redemptions (original_transaction_id);
CREATE INDEX redemptions_product_id ON redemptions (product_id);
CREATE INDEX redemptions_bundle_id ON redemptions (bundle_id);
CREATE INDEX redemptions_redeemed_at ON redemptions (redeemed_at);

CREATE TABLE attempts (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    code TEXT NOT NULL,
    detail TEXT NOT NULL,
    transaction_id TEXT,
    product_id TEXT,
    receipt_sha256 TEXT NOT NULL,
    client_address TEXT NOT NULL
);

CREATE INDEX attempts_transaction_id ON attempts (transaction_id);
CREATE INDEX attempts_code ON attempts (code);
CREATE INDEX attempts_at ON attempts (at);

CREATE TABLE api_keys (
    key_id TEXT PRIMARY KEY NOT NULL,
    name TEXT NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('admin', 'auditor')),
    secret_hash TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL,
    revoked_at REAL
);
