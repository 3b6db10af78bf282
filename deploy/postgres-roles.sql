-- deploy/postgres-roles.sql: what each PostgreSQL role may do in Coffer's database.
-- A TEMPLATE: review it (role and database names, the schema, the optional parts) before you
-- run it. README, "PostgreSQL"; deploy/README.md, "Two or more instances on PostgreSQL".
--
--   coffer_owner  owns the tables: runs `coffer migrate` and `coffer ledger copy`. No instance
--                 connects as it.
--   coffer_app    `coffer serve` and `coffer keys`: reads, appends to the ledger, edits the
--                 catalogue, adds, signs and revokes API keys, rewrites the seal. No DDL; no UPDATE or
--                 DELETE on the ledger.
--   coffer_audit  read-only, for `coffer ledger verify|export --database` (optional: delete
--                 its lines if you don't create it).
--
-- 1. Roles and database (passwords are prompted for, never on a command line):
--      sudo -u postgres createuser --pwprompt coffer_owner
--      sudo -u postgres createuser --pwprompt coffer_app
--      sudo -u postgres createuser --pwprompt coffer_audit
--      sudo -u postgres createdb --owner coffer_owner --encoding UTF8 --template template0 coffer
-- 2. coffer migrate --database 'postgres://coffer_owner:…@HOST:5432/coffer?sslmode=…'
-- 3. This file, as a superuser, now and again after every `coffer migrate` (it only grants and
--    revokes, so it can run any number of times):
--      sudo -u postgres psql -v ON_ERROR_STOP=1 -d coffer -f postgres-roles.sql
--
-- Assumes Coffer's tables are in schema public (the default search_path).

BEGIN;

-- Nobody else connects, creates temporary tables or creates objects in public.
REVOKE ALL ON DATABASE coffer FROM PUBLIC;
GRANT CONNECT ON DATABASE coffer TO coffer_app, coffer_audit;
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO coffer_app, coffer_audit;

-- The ledger: read and append. Its append-only triggers refuse UPDATE, DELETE and TRUNCATE to
-- every role, the owner included; the owner (or a superuser) can drop a trigger, which is what
-- the hash chain, the seal and pinned checkpoints are there to detect.
GRANT SELECT, INSERT ON redemptions, attempts, revocations, ledger_events, ledger_checkpoints, admin_actions, purchase_events TO coffer_app;
-- The seal: one row, signed and rewritten by every transaction that appends.
GRANT SELECT, INSERT, UPDATE ON ledger_head TO coffer_app;
-- Delivery evidence: one counted row per redemption, asset and digest, updated as downloads
-- finish (not chained).
GRANT SELECT, INSERT, UPDATE ON deliveries TO coffer_app;
-- The catalogue (admin API).
GRANT SELECT, INSERT, UPDATE, DELETE ON products, assets TO coffer_app;
-- Content pins (migration 0009): the checked version of each bucket object, appended (the
-- newest counts; not chained).
GRANT SELECT, INSERT ON content_pins TO coffer_app;
-- The API keys (`coffer keys`): added, revoked once, and (made before keys were signed) signed
-- once by `coffer keys adopt --sign`; never changed otherwise or deleted (the table's guard
-- trigger refuses that to every role too, migration 0007). A key is used only when the ledger
-- signing key, which this role does not hold, signed it.
REVOKE UPDATE, DELETE, TRUNCATE ON api_keys FROM coffer_app;
GRANT SELECT, INSERT ON api_keys TO coffer_app;
GRANT UPDATE (revoked_at, signature) ON api_keys TO coffer_app;
-- `serve` reads which migrations were applied; only `coffer migrate` records one.
GRANT SELECT ON coffer_migrations TO coffer_app;
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON coffer_migrations FROM coffer_app;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO coffer_app;

-- Auditors: read everything, in read-only transactions.
GRANT SELECT ON ALL TABLES IN SCHEMA public TO coffer_audit;
ALTER ROLE coffer_audit IN DATABASE coffer SET default_transaction_read_only = on;

-- Durability: a 201 means the COMMIT was flushed on the server only while synchronous_commit
-- is on (the default). Pinned here for Coffer's sessions, whatever postgresql.conf, the database
-- or a later ALTER SYSTEM says. With synchronous replication, `on` waits for the synchronous
-- standby's flush too; use remote_apply here if you also want the standby to have applied it.
ALTER ROLE coffer_app IN DATABASE coffer SET synchronous_commit = on;
-- The writer lets the chain's lock go before its batch is flushed and then waits for the
-- flush with a one-record transaction (pg_logical_emit_message, prefix 'coffer'; granted to
-- coffer_app below, revoked from PUBLIC; migration 0005). Revoking it from coffer_app too is
-- safe, also while instances run (migration 0006): each batch's COMMIT then waits for the
-- flush under the lock, as before 0005. CDC consumers that ask for logical messages can drop
-- the 'coffer' prefix.

-- Advisory locks are the chain's lock and the checkpoint leader's, and PostgreSQL lets every
-- role take any of them: a session of coffer_audit holding the chain's lock would stop every
-- append (each gives up after lock_timeout with 503). Only the instances and `coffer migrate`
-- take them; the same for the flush record (pg_logical_emit_message, which a role that may
-- only read could otherwise write to the WAL in a BEGIN READ WRITE) and for Coffer's own
-- functions and procedures (the owner keeps EXECUTE on those it owns). Large objects are
-- stored rows too (a read-only role could fill the disk with them in a BEGIN READ WRITE):
-- Coffer uses none, so nobody keeps those.
DO $$
DECLARE
    f regprocedure;
    coffer_uses boolean;
BEGIN
    FOR f, coffer_uses IN
        SELECT p.oid::regprocedure, p.proname NOT LIKE 'lo\_%' FROM pg_proc p
        WHERE p.pronamespace = 'pg_catalog'::regnamespace
          AND ((p.proname LIKE 'pg\_%advisory\_%lock%' AND p.proname NOT LIKE '%unlock%') OR p.proname = 'pg_logical_emit_message'
               OR p.proname IN ('lo_create', 'lo_creat', 'lo_from_bytea', 'lo_put', 'lo_open', 'lo_import'))
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
        IF coffer_uses THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO coffer_owner, coffer_app', f);
        END IF;
    END LOOP;
END $$;
REVOKE EXECUTE ON ALL ROUTINES IN SCHEMA public FROM PUBLIC;
GRANT EXECUTE ON ALL ROUTINES IN SCHEMA public TO coffer_app;
-- …and so for the routines a later migration adds, before this file runs again.
ALTER DEFAULT PRIVILEGES FOR ROLE coffer_owner REVOKE EXECUTE ON ROUTINES FROM PUBLIC;
ALTER DEFAULT PRIVILEGES FOR ROLE coffer_owner GRANT EXECUTE ON ROUTINES TO coffer_app;
-- The audit role's reads ask which flush record they may write (none: it may not write one).
GRANT EXECUTE ON FUNCTION coffer_flush_after() TO coffer_audit;

-- Optional: cap the connections, at least instances × (COFFER_DATABASE_POOL_SIZE + 1) (default
-- 10, 2 at least: one is the ledger writer's own; the + 1 is the `coffer-probe` connection an
-- instance opens while a statement has gone unanswered for 2 s) plus a few for `coffer keys`
-- and `coffer ledger`.
-- ALTER ROLE coffer_app CONNECTION LIMIT 40;

COMMIT;

-- Tables a later migration adds: read and append for coffer_app, read for coffer_audit. Anything
-- more a new table needs is granted above, by name, in that release's copy of this file.
ALTER DEFAULT PRIVILEGES FOR ROLE coffer_owner IN SCHEMA public GRANT SELECT, INSERT ON TABLES TO coffer_app;
ALTER DEFAULT PRIVILEGES FOR ROLE coffer_owner IN SCHEMA public GRANT USAGE ON SEQUENCES TO coffer_app;
ALTER DEFAULT PRIVILEGES FOR ROLE coffer_owner IN SCHEMA public GRANT SELECT ON TABLES TO coffer_audit;
