-- 0006_signed_api_keys: an API key is used only when the ledger signing key signed it, and a
-- key changes only by being revoked once (or, made before this, by being signed once).
--
-- Before this, whoever could write the database could add an admin key whose secret they
-- knew, turn an auditor key into an admin one, or clear a revocation. Now `coffer keys create`
-- (and the demo) store an Ed25519 signature of the key's fields by the ledger key, and the
-- server refuses a key without a valid one (README, "API keys are signed"). The keys that
-- exist now have none: they are refused until `coffer keys adopt --sign ID`, run by whoever holds
-- the ledger key, signs them. These triggers refuse every other change to a key, a delete,
-- and an insert or update onto an existing key — its id, its hash or its rowid (INSERT OR
-- REPLACE or UPDATE OR REPLACE would otherwise delete the revoked row without the delete
-- trigger, and it could be put back live; an insert without a rowid sees NEW.rowid -1). The
-- file's owner can drop them.
ALTER TABLE api_keys ADD COLUMN signature TEXT;

CREATE TRIGGER api_keys_no_replace BEFORE INSERT ON api_keys
WHEN EXISTS (SELECT 1 FROM api_keys WHERE key_id = NEW.key_id OR secret_hash = NEW.secret_hash OR (NEW.rowid > 0 AND rowid = NEW.rowid))
BEGIN SELECT RAISE(ABORT, 'an API key is never replaced'); END;
CREATE TRIGGER api_keys_revoke_or_sign_once BEFORE UPDATE ON api_keys
WHEN NEW.rowid IS NOT OLD.rowid OR NEW.key_id IS NOT OLD.key_id OR NEW.name IS NOT OLD.name OR NEW.role IS NOT OLD.role
    OR NEW.secret_hash IS NOT OLD.secret_hash OR NEW.created_at IS NOT OLD.created_at
    OR NOT (
        (OLD.revoked_at IS NULL AND NEW.revoked_at IS NOT NULL AND typeof(NEW.revoked_at) IN ('real', 'integer') AND abs(NEW.revoked_at) < 1e12
            AND NEW.signature IS OLD.signature)
        OR (OLD.signature IS NULL AND NEW.signature IS NOT NULL AND NEW.revoked_at IS OLD.revoked_at)
    )
BEGIN SELECT RAISE(ABORT, 'an API key changes only by being revoked once, or signed once'); END;
CREATE TRIGGER api_keys_no_delete BEFORE DELETE ON api_keys
BEGIN SELECT RAISE(ABORT, 'API keys are never deleted: revoke them (coffer keys revoke)'); END;
