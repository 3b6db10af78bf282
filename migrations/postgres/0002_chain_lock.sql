-- 0002_chain_lock: what every appending transaction does first — take the chain's advisory
-- lock, then read the head, the seal, the replay rule's lookups for the purchases it is about
-- to write and the next row numbers — in one round trip instead of four. The lock is held from
-- here to COMMIT, so fewer round trips under it is what lets more redemptions through per
-- second: with the numbers known, the rows, their events, the checkpoints due and the seal
-- are one statement.
--
-- Redemptions and attempts are numbered by the writer holding the chain's lock (the largest
-- number + 1), no longer by an identity default: the numbers have no gaps (a sequence skips
-- a number on every rollback), and a row inserted behind the servers' backs must name its
-- number (it is still found by the start-up check for rows no event chains). The numbers stay
-- below 2^53 (exact as JSON numbers everywhere), so a row inserted with a huge number cannot
-- make the next one overflow.
ALTER TABLE redemptions ALTER COLUMN sequence DROP IDENTITY;
ALTER TABLE attempts ALTER COLUMN sequence DROP IDENTITY;
ALTER TABLE redemptions ADD CONSTRAINT redemptions_sequence_range CHECK (sequence BETWEEN 1 AND 9007199254740991);
ALTER TABLE attempts ADD CONSTRAINT attempts_sequence_range CHECK (sequence BETWEEN 1 AND 9007199254740991);

-- coffer_lock_chain's reads need a snapshot taken after the lock was granted: a VOLATILE
-- function takes a new snapshot for each statement it runs (READ COMMITTED), so the RETURN
-- QUERY sees every commit made before pg_advisory_xact_lock returned. A plain SELECT calling
-- the lock could not: its snapshot would predate the wait.
CREATE FUNCTION coffer_lock_chain(lock_key bigint, environments text[], replay_keys text[])
RETURNS TABLE (
    head_sequence bigint, head_hash text,
    seal_sequence bigint, seal_hash text, seal_time bigint, seal_key_id text, seal_signature text,
    redeemed_environments text[], redeemed_keys text[], revoked bigint[],
    next_redemption bigint, next_attempt bigint
) LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    PERFORM pg_advisory_xact_lock(lock_key);
    RETURN QUERY
    WITH wanted AS (
        SELECT w.environment, w.replay_key FROM unnest(environments, replay_keys) AS w(environment, replay_key)
    ), redeemed AS (
        -- One index lookup per purchase (LATERAL … LIMIT 1: never a scan of the table): by
        -- environment and replay key; rows copied from a SQLite ledger older than its
        -- migration 0003 (no replay key) also by original transaction id.
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
