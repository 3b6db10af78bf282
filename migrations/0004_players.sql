-- 0004_players: player identity, subscriptions, the refund lifecycle and delivery evidence.
-- Rows keep their sequence numbers and values, so every existing chain entry still matches;
-- the columns added here are NULL on older rows and left out of their canonical bytes.

-- Products: subscriptions (auto-renewable, non-renewing with a duration) and family sharing.
CREATE TABLE products_0004 (
    product_id TEXT PRIMARY KEY NOT NULL,
    bundle_id TEXT NOT NULL,
    type TEXT NOT NULL CHECK (type IN ('consumable', 'nonConsumable', 'autoRenewable', 'nonRenewing')),
    asset_ids TEXT NOT NULL CHECK (json_valid(asset_ids) AND json_type(asset_ids) = 'array'), -- JSON array of asset ids
    title TEXT NOT NULL,
    updated_at REAL NOT NULL,
    family_shareable INTEGER NOT NULL DEFAULT 0 CHECK (family_shareable IN (0, 1)),
    duration_seconds INTEGER CHECK (duration_seconds IS NULL OR duration_seconds > 0)
);
INSERT INTO products_0004 (product_id, bundle_id, type, asset_ids, title, updated_at)
SELECT product_id, bundle_id, type, asset_ids, title, updated_at FROM products;
DROP TABLE products;
ALTER TABLE products_0004 RENAME TO products;

-- Redemptions: the player a purchase is bound to (the player token's sub), and a
-- subscription's end as of its redemption.
ALTER TABLE redemptions ADD COLUMN player_id TEXT;
ALTER TABLE redemptions ADD COLUMN expires_at REAL;
CREATE INDEX redemptions_player_id ON redemptions (player_id) WHERE player_id IS NOT NULL;

-- Purchase events: restores, renewals, subscription status, refund reversals and declines,
-- appended and chained like revocations. A notification adds at most one event (Apple retries).
CREATE TABLE purchase_events (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    environment TEXT NOT NULL,
    replay_key TEXT NOT NULL,
    redemption_id TEXT NOT NULL,
    transaction_id TEXT NOT NULL,
    detail TEXT NOT NULL,
    source TEXT NOT NULL CHECK (source IN ('notification', 'client', 'admin')),
    reference TEXT NOT NULL,
    player_id TEXT,
    expires_at REAL,
    grace_until REAL
);
CREATE INDEX purchase_events_purchase ON purchase_events (environment, replay_key);
CREATE UNIQUE INDEX purchase_events_notification ON purchase_events (reference) WHERE source = 'notification';
CREATE TRIGGER purchase_events_no_update BEFORE UPDATE ON purchase_events BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER purchase_events_no_delete BEFORE DELETE ON purchase_events BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;

-- Ledger events: purchase events are chained too.
DROP TRIGGER ledger_events_no_update;
DROP TRIGGER ledger_events_no_delete;
CREATE TABLE ledger_events_0004 (
    sequence INTEGER PRIMARY KEY NOT NULL CHECK (sequence >= 1),
    kind TEXT NOT NULL CHECK (kind IN ('redemption', 'attempt', 'revocation', 'adminAction', 'purchaseEvent')),
    row_sequence INTEGER NOT NULL,
    entry_hash TEXT NOT NULL CHECK (length(entry_hash) = 64),
    UNIQUE (kind, row_sequence)
);
INSERT INTO ledger_events_0004 (sequence, kind, row_sequence, entry_hash) SELECT sequence, kind, row_sequence, entry_hash FROM ledger_events;
DROP TABLE ledger_events;
ALTER TABLE ledger_events_0004 RENAME TO ledger_events;
CREATE TRIGGER ledger_events_no_update BEFORE UPDATE ON ledger_events BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER ledger_events_no_delete BEFORE DELETE ON ledger_events BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;

-- Delivery evidence: what was served of each asset version per redemption. Counted, not
-- chained: one row per (redemption, asset, digest), updated as downloads finish.
CREATE TABLE deliveries (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    redemption_id TEXT NOT NULL,
    asset_id TEXT NOT NULL,
    sha256 TEXT NOT NULL CHECK (length(sha256) = 64),
    first_at REAL NOT NULL,
    last_at REAL NOT NULL,
    downloads INTEGER NOT NULL CHECK (downloads >= 0),
    completed INTEGER NOT NULL CHECK (completed >= 0),
    bytes_served INTEGER NOT NULL CHECK (bytes_served >= 0),
    complete INTEGER NOT NULL CHECK (complete IN (0, 1)),
    UNIQUE (redemption_id, asset_id, sha256)
);
