-- 0006_flush_checked: the flush after the lock survives EXECUTE on pg_logical_emit_message
-- being revoked while instances run.
--
-- 0005 looked up once per session whether it may write the flush record, and kept the
-- answer. Revoked after that, each batch of that session committed (without waiting for the
-- flush), then failed on the record; the writer's own flush failed the same way, so every
-- buyer was answered 503 for a purchase now redeemed (and 409 on the retry), for as long as
-- the session lived.
--
-- Now the privilege is checked at every call (the function's oid is looked up once per
-- session; then it is one ACL check), so the batch after a revoke commits waiting for its
-- flush under the lock, as without the privilege from the start. And coffer_flush waits for
-- the flush without the record too: it locks the seal's row FOR KEY SHARE — which neither
-- waits for the seal's UPDATE nor holds it up — a WAL record that gives its transaction an
-- id, so its COMMIT waits for the flush through everything committed before it. A batch whose
-- record failed after its COMMIT (a revoke between the check and the record) is flushed that
-- way by the writer before it is answered. With no seal row to lock — a ledger kept without
-- a signing key, which `coffer serve` never is — there is nothing to lock: as before, no
-- wait (the audit reads' flush must not fail there).

-- Whether this session may flush after letting the lock go: it may write the flush record,
-- and its synchronous_commit waits for a flush.
CREATE OR REPLACE FUNCTION coffer_flush_after() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    emit text := current_setting('coffer.emit_message', true);
BEGIN
    IF current_setting('synchronous_commit') NOT IN ('on', 'remote_apply', 'remote_write', 'local') THEN
        RETURN false;
    END IF;
    IF emit IS NULL OR emit = '' THEN
        SELECT coalesce(min(p.oid), 0)::text INTO emit
        FROM pg_proc AS p
        WHERE p.proname = 'pg_logical_emit_message' AND p.pronamespace = 'pg_catalog'::regnamespace AND p.proargtypes[2] = 'text'::regtype;
        PERFORM set_config('coffer.emit_message', emit, false);
    END IF;
    RETURN emit <> '0' AND has_function_privilege(emit::oid, 'EXECUTE');
END
$$;

-- Waits until the WAL is flushed through everything committed so far: one WAL record (the
-- flush record, or without it a row lock of the seal) in a transaction of its own, committed
-- here, inside the CALL, as the session's synchronous_commit says. Nothing to do on a standby
-- (it only ever receives flushed WAL), in a read-only transaction (tools reading as the audit
-- role) or where synchronous_commit does not wait for flushes.
CREATE OR REPLACE PROCEDURE coffer_flush() LANGUAGE plpgsql AS $$
BEGIN
    IF pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'
        OR current_setting('synchronous_commit') NOT IN ('on', 'remote_apply', 'remote_write', 'local') THEN
        RETURN;
    END IF;
    IF coffer_flush_after() THEN
        PERFORM pg_logical_emit_message(true, 'coffer', '');
    ELSE
        PERFORM 1 FROM ledger_head FOR KEY SHARE;
    END IF;
    COMMIT;
END
$$;
