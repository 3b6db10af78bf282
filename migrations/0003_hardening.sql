-- 0003_hardening: replays and revocations per environment and replay key, revocations kept
-- for purchases not redeemed yet, attempts mark claimed identifiers, the admin log joins the
-- hash chain. Rows keep their sequence numbers, so every existing chain entry still matches.
-- Columns added here are NULL on older rows and left out of their canonical bytes.

-- The append-only triggers are dropped while tables are rebuilt, and recreated below.
DROP TRIGGER redemptions_no_update;
DROP TRIGGER redemptions_no_delete;
DROP TRIGGER revocations_no_update;
DROP TRIGGER revocations_no_delete;
DROP TRIGGER ledger_events_no_update;
DROP TRIGGER ledger_events_no_delete;

-- Redemptions: transaction_id is no longer UNIQUE on its own. Sandbox and Production share
-- one transaction-id space, and a non-consumable restored on a new device carries a new
-- transaction id: the replay guarantee is one redemption per (environment, replay key),
-- where the replay key is the original transaction id of a non-consumable and the
-- transaction id otherwise (NULL on older rows: their transaction id).
CREATE TABLE redemptions_0003 (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    redemption_id TEXT NOT NULL UNIQUE,
    transaction_id TEXT NOT NULL,
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
    grant_hash TEXT NOT NULL UNIQUE,
    replay_key TEXT
);
INSERT INTO redemptions_0003 (
    sequence, redemption_id, transaction_id, original_transaction_id, product_id, bundle_id, environment, purchase_date,
    quantity, receipt_sha256, source_format, redeemed_at, client_address, app_account_token, status, grant_hash
)
SELECT sequence, redemption_id, transaction_id, original_transaction_id, product_id, bundle_id, environment, purchase_date,
    quantity, receipt_sha256, source_format, redeemed_at, client_address, app_account_token, status, grant_hash
FROM redemptions;
DROP TABLE redemptions;
ALTER TABLE redemptions_0003 RENAME TO redemptions;
CREATE UNIQUE INDEX redemptions_replay ON redemptions (environment, coalesce(replay_key, transaction_id));
CREATE INDEX redemptions_transaction_id ON redemptions (transaction_id);
CREATE INDEX redemptions_original_transaction_id ON redemptions (original_transaction_id);
CREATE INDEX redemptions_product_id ON redemptions (product_id);
CREATE INDEX redemptions_bundle_id ON redemptions (bundle_id);
CREATE INDEX redemptions_redeemed_at ON redemptions (redeemed_at);

-- Revocations: one per (environment, replay key); redemption_id is '' for a purchase refunded
-- before it was redeemed (kept, so that a later redemption is refused).
CREATE TABLE revocations_0003 (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    redemption_id TEXT NOT NULL,
    transaction_id TEXT NOT NULL,
    revoked_at REAL NOT NULL,
    reason TEXT NOT NULL,
    source TEXT NOT NULL CHECK (source IN ('notification', 'admin')),
    reference TEXT NOT NULL,
    recorded_at REAL NOT NULL,
    environment TEXT,
    replay_key TEXT
);
INSERT INTO revocations_0003 (sequence, redemption_id, transaction_id, revoked_at, reason, source, reference, recorded_at)
SELECT sequence, redemption_id, transaction_id, revoked_at, reason, source, reference, recorded_at FROM revocations;
DROP TABLE revocations;
ALTER TABLE revocations_0003 RENAME TO revocations;
CREATE UNIQUE INDEX revocations_key ON revocations (coalesce(environment, ''), coalesce(replay_key, transaction_id));
CREATE INDEX revocations_redemption_id ON revocations (redemption_id);

-- Attempts: 1 when transaction_id / product_id are claims (from a proof that did not verify, or
-- sent by the client), escaped and capped at 128 bytes; 0 when verified.
ALTER TABLE attempts ADD COLUMN claimed INTEGER CHECK (claimed IN (0, 1));

-- Ledger events: admin actions are chained too.
CREATE TABLE ledger_events_0003 (
    sequence INTEGER PRIMARY KEY NOT NULL CHECK (sequence >= 1),
    kind TEXT NOT NULL CHECK (kind IN ('redemption', 'attempt', 'revocation', 'adminAction')),
    row_sequence INTEGER NOT NULL,
    entry_hash TEXT NOT NULL CHECK (length(entry_hash) = 64),
    UNIQUE (kind, row_sequence)
);
INSERT INTO ledger_events_0003 (sequence, kind, row_sequence, entry_hash) SELECT sequence, kind, row_sequence, entry_hash FROM ledger_events;
DROP TABLE ledger_events;
ALTER TABLE ledger_events_0003 RENAME TO ledger_events;

-- The seal: the chain's head as last signed by the server's key, rewritten (one row) in every
-- transaction that appends, and checked before the next one appends. Entries appended,
-- removed or rewritten behind the server's back no longer end where the seal says: the
-- server refuses to extend or sign over them, and `coffer ledger verify` names them.
CREATE TABLE ledger_head (
    id INTEGER PRIMARY KEY NOT NULL CHECK (id = 1),
    sequence INTEGER NOT NULL,
    entry_hash TEXT NOT NULL CHECK (length(entry_hash) = 64),
    time INTEGER NOT NULL,
    key_id TEXT NOT NULL,
    signature TEXT NOT NULL
);

CREATE TRIGGER redemptions_no_update BEFORE UPDATE ON redemptions BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER redemptions_no_delete BEFORE DELETE ON redemptions BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER revocations_no_update BEFORE UPDATE ON revocations BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER revocations_no_delete BEFORE DELETE ON revocations BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER ledger_events_no_update BEFORE UPDATE ON ledger_events BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER ledger_events_no_delete BEFORE DELETE ON ledger_events BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
