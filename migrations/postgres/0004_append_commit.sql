-- 0004_append_commit: the redemption writer appends in two round trips instead of four.
--
-- Until now a batch was BEGIN, coffer_lock_chain (the transaction-scoped lock and the reads),
-- the write statement, COMMIT: four round trips, the chain's lock held across three of them
-- and the flush. Now the writer takes the lock for its session (coffer_take_chain, outside any
-- transaction block), then CALLs coffer_append_commit, which writes, COMMITs (flushed on the
-- server before the CALL answers) and only then lets the lock go: the next appender, on any
-- instance, reads after that commit, as before.
--
-- The write itself moved from the server's code into coffer_append_rows, so both kinds of
-- appender run the same statement: the writer through the procedure, every other appender
-- (revocations, notifications, the admin log, tools: BEGIN, coffer_lock_chain, …, COMMIT)
-- inside its own transaction.

-- What an appender reads once it holds the chain: the head, the seal, the replay rule's
-- lookups for the purchases it is about to write and the next row numbers (the query of
-- 0002's coffer_lock_chain). VOLATILE: its query takes a snapshot of its own, after the
-- caller's lock was granted.
CREATE FUNCTION coffer_chain_state(environments text[], replay_keys text[])
RETURNS TABLE (
    head_sequence bigint, head_hash text,
    seal_sequence bigint, seal_hash text, seal_time bigint, seal_key_id text, seal_signature text,
    redeemed_environments text[], redeemed_keys text[], revoked bigint[],
    next_redemption bigint, next_attempt bigint
) LANGUAGE plpgsql VOLATILE
-- One plan, made once per connection: a custom plan per call (the arrays' lengths differ) was
-- a quarter of the server's CPU for these two functions.
SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH wanted AS (
        SELECT w.environment, w.replay_key FROM unnest(environments, replay_keys) AS w(environment, replay_key)
    ), redeemed AS (
        SELECT w.environment, w.replay_key AS k FROM wanted AS w
        CROSS JOIN LATERAL (
            SELECT 1 FROM redemptions AS r
            WHERE r.environment = w.environment AND coalesce(r.replay_key, r.transaction_id) = w.replay_key LIMIT 1
        ) AS found
        UNION ALL
        SELECT w.environment, w.replay_key FROM wanted AS w
        CROSS JOIN LATERAL (
            SELECT 1 FROM redemptions AS r
            WHERE r.original_transaction_id = w.replay_key AND r.replay_key IS NULL AND r.environment = w.environment LIMIT 1
        ) AS found
    ), revoked AS (
        SELECT v.sequence FROM wanted AS w
        CROSS JOIN LATERAL (
            SELECT v.sequence FROM revocations AS v
            WHERE coalesce(v.environment, '') = w.environment AND coalesce(v.replay_key, v.transaction_id) = w.replay_key LIMIT 1
        ) AS v
    )
    SELECT e.sequence, e.entry_hash, h.sequence, h.entry_hash, h.time, h.key_id, h.signature,
        coalesce((SELECT array_agg(d.environment ORDER BY d.environment, d.k) FROM redeemed AS d), '{}'),
        coalesce((SELECT array_agg(d.k ORDER BY d.environment, d.k) FROM redeemed AS d), '{}'),
        coalesce((SELECT array_agg(DISTINCT v.sequence) FROM revoked AS v), '{}'),
        (SELECT coalesce(max(r.sequence), 0) + 1 FROM redemptions AS r),
        (SELECT coalesce(max(a.sequence), 0) + 1 FROM attempts AS a)
    FROM (SELECT 1) AS one
    LEFT JOIN LATERAL (SELECT l.sequence, l.entry_hash FROM ledger_events AS l ORDER BY l.sequence DESC LIMIT 1) AS e ON true
    LEFT JOIN ledger_head AS h ON h.id = 1;
END
$$;

-- The writer's lock, for its session, taken outside a transaction block: it outlasts this
-- statement's own commit and is let go by coffer_append_commit, by coffer_abandon_chain, or
-- when the session ends (an instance killed holds nothing). A session that goes quiet while
-- holding it — a frozen process, a lost network — is ended by the server after 5 s
-- (idle_session_timeout, PostgreSQL 14 and later), which lets it go. A read that fails lets the
-- lock go here, on the server: its caller may not reach the server again to do it.
CREATE FUNCTION coffer_take_chain(lock_key bigint, environments text[], replay_keys text[])
RETURNS TABLE (
    head_sequence bigint, head_hash text,
    seal_sequence bigint, seal_hash text, seal_time bigint, seal_key_id text, seal_signature text,
    redeemed_environments text[], redeemed_keys text[], revoked bigint[],
    next_redemption bigint, next_attempt bigint
) LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_lock(lock_key);
    BEGIN
        IF current_setting('server_version_num')::integer >= 140000 THEN
            PERFORM set_config('idle_session_timeout', '5s', false);
        END IF;
        -- This session holds the lock (coffer_append_commit checks; cheaper than pg_locks).
        PERFORM set_config('coffer.chain_lock', lock_key::text, false);
        RETURN QUERY SELECT * FROM coffer_chain_state(environments, replay_keys);
    EXCEPTION WHEN OTHERS THEN
        PERFORM pg_advisory_unlock(lock_key);
        RAISE;
    END;
END
$$;

-- A batch's rows, their chain events, the checkpoints due and the seal, in one statement:
-- columns as arrays, unnested (the driver's arrays hold no NULL, so each nullable column comes
-- with a flag array). Redemptions and attempts carry the numbers given under the chain's lock.
CREATE FUNCTION coffer_append_rows(
    r_seq bigint[], r_id text[], r_tx text[], r_otx text[], r_otx_null boolean[], r_product text[], r_bundle text[], r_env text[],
    r_pd double precision[], r_pd_null boolean[], r_qty integer[], r_sha text[], r_fmt text[], r_at double precision[], r_client text[],
    r_token text[], r_token_null boolean[], r_status text[], r_grant_hash text[], r_rk text[], r_rk_null boolean[], r_player text[],
    r_player_null boolean[], r_exp double precision[], r_exp_null boolean[],
    a_seq bigint[], a_at double precision[], a_code text[], a_detail text[], a_tx text[], a_tx_null boolean[], a_product text[],
    a_product_null boolean[], a_sha text[], a_client text[], a_claimed boolean[], a_claimed_null boolean[],
    e_seq bigint[], e_kind text[], e_row bigint[], e_hash text[],
    k_seq bigint[], k_hash text[], k_time bigint[], k_key_id text[], k_signature text[],
    s_seq bigint[], s_hash text[], s_time bigint[], s_key_id text[], s_signature text[]
) RETURNS void LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    -- Data-modifying WITH clauses run once each, whether or not the outer statement reads them.
    WITH redemption_rows AS (
        INSERT INTO redemptions (sequence, redemption_id, transaction_id, original_transaction_id, product_id, bundle_id, environment,
            purchase_date, quantity, receipt_sha256, source_format, redeemed_at, client_address, app_account_token, status, grant_hash,
            replay_key, player_id, expires_at)
        SELECT r.seq, r.id, r.tx, CASE WHEN r.otx_null THEN NULL ELSE r.otx END, r.product, r.bundle, r.env,
            CASE WHEN r.pd_null THEN NULL ELSE r.pd END, r.qty, r.sha, r.fmt, r.at, r.client, CASE WHEN r.token_null THEN NULL ELSE r.token END,
            r.status, r.grant_hash, CASE WHEN r.rk_null THEN NULL ELSE r.rk END, CASE WHEN r.player_null THEN NULL ELSE r.player END,
            CASE WHEN r.exp_null THEN NULL ELSE r.exp END
        FROM unnest(r_seq, r_id, r_tx, r_otx, r_otx_null, r_product, r_bundle, r_env, r_pd, r_pd_null, r_qty, r_sha, r_fmt, r_at, r_client,
            r_token, r_token_null, r_status, r_grant_hash, r_rk, r_rk_null, r_player, r_player_null, r_exp, r_exp_null)
            AS r(seq, id, tx, otx, otx_null, product, bundle, env, pd, pd_null, qty, sha, fmt, at, client, token, token_null, status,
                grant_hash, rk, rk_null, player, player_null, exp, exp_null)
    ), attempt_rows AS (
        INSERT INTO attempts (sequence, at, code, detail, transaction_id, product_id, receipt_sha256, client_address, claimed)
        SELECT a.seq, a.at, a.code, a.detail, CASE WHEN a.tx_null THEN NULL ELSE a.tx END, CASE WHEN a.product_null THEN NULL ELSE a.product END,
            a.sha, a.client, CASE WHEN a.claimed_null THEN NULL ELSE a.claimed END
        FROM unnest(a_seq, a_at, a_code, a_detail, a_tx, a_tx_null, a_product, a_product_null, a_sha, a_client, a_claimed, a_claimed_null)
            AS a(seq, at, code, detail, tx, tx_null, product, product_null, sha, client, claimed, claimed_null)
    ), events AS (
        INSERT INTO ledger_events (sequence, kind, row_sequence, entry_hash)
        SELECT * FROM unnest(e_seq, e_kind, e_row, e_hash)
    ), checkpoints AS (
        INSERT INTO ledger_checkpoints (sequence, entry_hash, time, key_id, signature)
        SELECT * FROM unnest(k_seq, k_hash, k_time, k_key_id, k_signature)
    )
    INSERT INTO ledger_head (id, sequence, entry_hash, time, key_id, signature)
    SELECT 1, * FROM unnest(s_seq, s_hash, s_time, s_key_id, s_signature)
    ON CONFLICT (id) DO UPDATE SET sequence = excluded.sequence, entry_hash = excluded.entry_hash, time = excluded.time,
        key_id = excluded.key_id, signature = excluded.signature;
END
$$;

-- The writer's append: the rows (coffer_append_rows), COMMIT — flushed on the server
-- (synchronous_commit) before the CALL answers — then the session's lock let go. CALLed
-- outside a transaction block, by a session holding the lock (coffer_take_chain); one that
-- does not hold it is refused before anything is written.
CREATE PROCEDURE coffer_append_commit(
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
BEGIN
    IF current_setting('coffer.chain_lock', true) IS DISTINCT FROM lock_key::text THEN
        RAISE EXCEPTION 'coffer: an append from a session that does not hold the chain''s lock' USING ERRCODE = 'P0001';
    END IF;
    PERFORM coffer_append_rows(
        r_seq, r_id, r_tx, r_otx, r_otx_null, r_product, r_bundle, r_env, r_pd, r_pd_null, r_qty, r_sha, r_fmt, r_at, r_client,
        r_token, r_token_null, r_status, r_grant_hash, r_rk, r_rk_null, r_player, r_player_null, r_exp, r_exp_null,
        a_seq, a_at, a_code, a_detail, a_tx, a_tx_null, a_product, a_product_null, a_sha, a_client, a_claimed, a_claimed_null,
        e_seq, e_kind, e_row, e_hash, k_seq, k_hash, k_time, k_key_id, k_signature, s_seq, s_hash, s_time, s_key_id, s_signature);
    COMMIT;
    -- Committed: whatever fails from here on (a cancel, a timeout) must not fail the CALL,
    -- or durable redemptions would be answered 503. The caller lets the lock go when this
    -- could not.
    BEGIN
        PERFORM pg_advisory_unlock(lock_key);
        PERFORM set_config('coffer.chain_lock', '', false);
        IF current_setting('server_version_num')::integer >= 140000 THEN
            RESET idle_session_timeout;
        END IF;
    EXCEPTION WHEN query_canceled OR others THEN
        RAISE WARNING 'coffer: could not let the chain''s lock go after a commit: %', SQLERRM;
    END;
END
$$;

-- What a writer that failed between coffer_take_chain and its append runs: every session
-- lock let go, the idle limit back to the session's default. When this fails too, the
-- server's code closes the connection (the server then lets the lock go with the session).
CREATE FUNCTION coffer_abandon_chain() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_unlock_all();
    PERFORM set_config('coffer.chain_lock', '', false);
    IF current_setting('server_version_num')::integer >= 140000 THEN
        RESET idle_session_timeout;
    END IF;
    RETURN true;
END
$$;
