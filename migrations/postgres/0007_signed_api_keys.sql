-- 0007_signed_api_keys: an API key is used only when the ledger signing key signed it, and a
-- key changes only by being revoked once (or, made before this, by being signed once) — SQLite
-- migration 0006.
--
-- Before this, coffer_app (every instance's role, granted INSERT, UPDATE and DELETE on
-- api_keys) could add an admin key whose secret it knew, turn an auditor key into an admin
-- one, or clear a revocation. Now `coffer keys create` (and the demo) store an Ed25519
-- signature of the key's fields by the ledger key, which no database role holds, and the
-- instances refuse a key without a valid one (README, "API keys are signed"). The keys that
-- exist now have none: they are refused until `coffer keys adopt --sign ID`, run by whoever holds
-- the ledger key, signs them. The guard refuses every other change to a key, and a delete, to
-- every role; coffer_app, not the owner, cannot drop it.
ALTER TABLE api_keys ADD COLUMN signature text;

CREATE FUNCTION coffer_api_keys_guard() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF (NEW.key_id, NEW.name, NEW.role, NEW.secret_hash, NEW.created_at) IS DISTINCT FROM (OLD.key_id, OLD.name, OLD.role, OLD.secret_hash, OLD.created_at)
            OR NOT coalesce(
                (OLD.revoked_at IS NULL AND NEW.revoked_at IS NOT NULL AND abs(NEW.revoked_at) < 1e12 AND NEW.signature IS NOT DISTINCT FROM OLD.signature)
                OR (OLD.signature IS NULL AND NEW.signature IS NOT NULL AND NEW.revoked_at IS NOT DISTINCT FROM OLD.revoked_at), false) THEN
            RAISE EXCEPTION 'an API key changes only by being revoked once, or signed once';
        END IF;
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'API keys are never deleted: revoke them (coffer keys revoke)';
END
$$;
CREATE TRIGGER api_keys_guard BEFORE UPDATE OR DELETE ON api_keys FOR EACH ROW EXECUTE FUNCTION coffer_api_keys_guard();
CREATE TRIGGER api_keys_no_truncate BEFORE TRUNCATE ON api_keys FOR EACH STATEMENT EXECUTE FUNCTION coffer_append_only();
