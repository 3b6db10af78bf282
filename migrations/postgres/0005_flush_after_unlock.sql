-- 0005_flush_after_unlock: the writer lets the chain's lock go before its commit's flush.
--
-- Until now coffer_append_commit COMMITted — waiting for the flush on the server — and only
-- then let the lock go, so every appender on every instance waited for each other's flush,
-- one after another: on a shared disk, one slow flush (10–70 ms under load) held up the
-- other instance's turn too, and its flush then waited behind the same disk.
--
-- Now the batch's transaction commits without waiting for the flush (synchronous_commit off
-- for that transaction alone): its rows are committed and visible to the next holder of the
-- lock at once. The lock goes. Then the procedure's last transaction writes one WAL record
-- (a transactional logical message, prefix 'coffer', empty; logical decoding consumers that
-- ask for messages see it) and commits as the session's synchronous_commit says (on by
-- default): that COMMIT waits until the WAL is flushed through its own record — which lies
-- after the batch's — so the CALL still answers only once the batch is flushed (and, with
-- synchronous standbys, confirmed by them as the setting says). A 201 still means flushed.
--
-- The flush's COMMIT is explicit, inside the procedure: the CALL's "complete" is sent only
-- after it (a commit left to the end of the CALL would run after that message was queued).
--
-- What a crash can do in between: the batch's COMMIT is in the WAL but not yet flushed. If
-- the server crashes then, the batch is lost — together with everything later in the WAL,
-- so no later batch that linked onto it survives without it, and no redemption caller was
-- answered for either (they are answered after the CALL, i.e. after the flush). The next
-- holder of the lock may read the batch before it is flushed; it answers its own callers
-- only after its own flush, which covers the earlier batch. Readers that publish signed
-- material (the audit API's checkpoints, seal and events) flush after reading
-- (coffer_flush) before they answer. A failure after the batch's COMMIT and before the flush
-- fails the CALL: the writer then flushes (coffer_flush) before it answers 201 for the
-- committed batch, or answers 503 when it cannot.
--
-- Without EXECUTE on pg_logical_emit_message (revoked on some managed servers), or on a
-- session whose synchronous_commit is not on, nothing changes: the batch's COMMIT waits for
-- the flush under the lock, as before (coffer_flush_after).
-- Whether this session may flush after letting the lock go: it may write the flush record,
-- and its synchronous_commit waits for a flush. Looked up once per session.
CREATE FUNCTION coffer_flush_after() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    known text := current_setting('coffer.flush_after', true);
    allowed boolean;
BEGIN
    IF known IS NOT NULL AND known <> '' THEN
        RETURN known::boolean;
    END IF;
    SELECT coalesce(bool_or(has_function_privilege(p.oid, 'EXECUTE')), false) INTO allowed
    FROM pg_proc AS p
    WHERE p.proname = 'pg_logical_emit_message' AND p.pronamespace = 'pg_catalog'::regnamespace AND p.proargtypes[2] = 'text'::regtype;
    allowed := allowed AND current_setting('synchronous_commit') IN ('on', 'remote_apply', 'remote_write', 'local');
    PERFORM set_config('coffer.flush_after', allowed::text, false);
    RETURN allowed;
END
$$;

-- Waits until the WAL is flushed through everything committed so far (one record in a
-- transaction of its own, committed here, inside the CALL). Nothing to do on a standby (it
-- only ever receives flushed WAL), in a read-only transaction (tools reading as the audit
-- role) or where coffer_flush_after is false (every batch's COMMIT waited for its flush).
CREATE PROCEDURE coffer_flush() LANGUAGE plpgsql AS $$
BEGIN
    IF pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on' OR NOT coffer_flush_after() THEN
        RETURN;
    END IF;
    PERFORM pg_logical_emit_message(true, 'coffer', '');
    COMMIT;
END
$$;

CREATE OR REPLACE PROCEDURE coffer_append_commit(
    lock_key bigint,
    r_seq bigint[], r_id text[], r_tx text[], r_otx text[], r_otx_null boolean[], r_product text[], r_bundle text[], r_env text[],
    r_pd double precision[], r_pd_null boolean[], r_qty integer[], r_sha text[], r_fmt text[], r_at double precision[], r_client text[],
    r_token text[], r_token_null boolean[], r_status text[], r_grant_hash text[], r_rk text[], r_rk_null boolean[], r_player text[],
    r_player_null boolean[], r_exp double precision[], r_exp_null boolean[],
    a_seq bigint[], a_at double precision[], a_code text[], a_detail text[], a_tx text[], a_tx_null boolean[], a_product text[],
    a_product_null boolean[], a_sha text[], a_client text[], a_claimed boolean[], a_claimed_null boolean[],
    e_seq bigint[], e_kind text[], e_row bigint[], e_hash text[],
    k_seq bigint[], k_hash text[], k_time bigint[], k_key_id text[], k_signature text[],
    s_seq bigint[], s_hash text[], s_time bigint[], s_key_id text[], s_signature text[]
) LANGUAGE plpgsql AS $$
DECLARE
    flush_after boolean := coffer_flush_after();
BEGIN
    IF current_setting('coffer.chain_lock', true) IS DISTINCT FROM lock_key::text THEN
        RAISE EXCEPTION 'coffer: an append from a session that does not hold the chain''s lock' USING ERRCODE = 'P0001';
    END IF;
    PERFORM coffer_append_rows(
        r_seq, r_id, r_tx, r_otx, r_otx_null, r_product, r_bundle, r_env, r_pd, r_pd_null, r_qty, r_sha, r_fmt, r_at, r_client,
        r_token, r_token_null, r_status, r_grant_hash, r_rk, r_rk_null, r_player, r_player_null, r_exp, r_exp_null,
        a_seq, a_at, a_code, a_detail, a_tx, a_tx_null, a_product, a_product_null, a_sha, a_client, a_claimed, a_claimed_null,
        e_seq, e_kind, e_row, e_hash, k_seq, k_hash, k_time, k_key_id, k_signature, s_seq, s_hash, s_time, s_key_id, s_signature);
    IF flush_after THEN
        -- This transaction only: committed and visible now, flushed below.
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    COMMIT;
    -- Committed: a failure to let the lock go must not fail the CALL (the caller lets it go
    -- when this could not).
    BEGIN
        PERFORM pg_advisory_unlock(lock_key);
        PERFORM set_config('coffer.chain_lock', '', false);
        IF current_setting('server_version_num')::integer >= 140000 THEN
            RESET idle_session_timeout;
        END IF;
    EXCEPTION WHEN query_canceled OR others THEN
        RAISE WARNING 'coffer: could not let the chain''s lock go after a commit: %', SQLERRM;
    END;
    -- The flush, with the lock already free: this transaction's one WAL record makes its
    -- COMMIT wait for the flush through the batch. Not caught: a CALL that fails here was
    -- not known to be flushed.
    IF flush_after THEN
        PERFORM pg_logical_emit_message(true, 'coffer', '');
        COMMIT;
    END IF;
END
$$;
