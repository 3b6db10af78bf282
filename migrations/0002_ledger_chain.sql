-- 0002_ledger_chain: the tamper-evident ledger (hash chain + signed checkpoints),
-- revocations as events, append-only enforcement, and the admin audit log.

-- A redeemed transaction later refunded or revoked (App Store notification or an admin):
-- a new event, never an edit of the redemption. Its grant stops minting tokens.
CREATE TABLE revocations (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    redemption_id TEXT NOT NULL,
    transaction_id TEXT NOT NULL UNIQUE,
    revoked_at REAL NOT NULL,
    reason TEXT NOT NULL,
    source TEXT NOT NULL CHECK (source IN ('notification', 'admin')),
    reference TEXT NOT NULL,
    recorded_at REAL NOT NULL
);

-- One row per ledger event, in order. entry_hash = SHA-256(previous entry_hash ||
-- canonical bytes of the entry); the canonical bytes are built from the referenced row
-- (README, "Tamper-evident ledger"), so editing that row breaks the chain.
CREATE TABLE ledger_events (
    sequence INTEGER PRIMARY KEY NOT NULL CHECK (sequence >= 1),
    kind TEXT NOT NULL CHECK (kind IN ('redemption', 'attempt', 'revocation')),
    row_sequence INTEGER NOT NULL,
    entry_hash TEXT NOT NULL CHECK (length(entry_hash) = 64),
    UNIQUE (kind, row_sequence)
);

-- Ed25519-signed (sequence, entry_hash, time) statements.
CREATE TABLE ledger_checkpoints (
    sequence INTEGER PRIMARY KEY NOT NULL,
    entry_hash TEXT NOT NULL CHECK (length(entry_hash) = 64),
    time INTEGER NOT NULL,
    key_id TEXT NOT NULL,
    signature TEXT NOT NULL
);

-- Every admin action (uploads, product changes), who did it and from where.
CREATE TABLE admin_actions (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    key_id TEXT NOT NULL,
    key_name TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    detail TEXT NOT NULL,
    client_address TEXT NOT NULL
);

-- Append-only: the code has no UPDATE or DELETE path for these tables, and SQLite refuses
-- one from anywhere else. (Whoever can rewrite the file can drop a trigger: that is what
-- the hash chain and the checkpoints are for.)
CREATE TRIGGER redemptions_no_update BEFORE UPDATE ON redemptions BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER redemptions_no_delete BEFORE DELETE ON redemptions BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER attempts_no_update BEFORE UPDATE ON attempts BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER attempts_no_delete BEFORE DELETE ON attempts BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER revocations_no_update BEFORE UPDATE ON revocations BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER revocations_no_delete BEFORE DELETE ON revocations BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER ledger_events_no_update BEFORE UPDATE ON ledger_events BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER ledger_events_no_delete BEFORE DELETE ON ledger_events BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER ledger_checkpoints_no_update BEFORE UPDATE ON ledger_checkpoints BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER ledger_checkpoints_no_delete BEFORE DELETE ON ledger_checkpoints BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER admin_actions_no_update BEFORE UPDATE ON admin_actions BEGIN SELECT RAISE(ABORT, 'the admin log is append-only'); END;
CREATE TRIGGER admin_actions_no_delete BEFORE DELETE ON admin_actions BEGIN SELECT RAISE(ABORT, 'the admin log is append-only'); END;
