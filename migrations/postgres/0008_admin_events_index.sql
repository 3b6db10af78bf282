-- 0008_admin_events_index: the admin log's chain events by position, for the server's check
-- of the catalogue against the chained admin log: after each catalogue row it reads, it reads
-- the admin-log events chained after the last it has (in chain order, as `coffer ledger
-- verify` replays them). Partial: redemptions and attempts, nearly every event, are not in it,
-- so appending them costs nothing more.
CREATE INDEX ledger_events_admin ON ledger_events (sequence) WHERE kind = 'adminAction';
