-- 0009_content_pins: the version of each object-store object whose bytes Coffer checked
-- against their address (SQLite's 0008). `tag` is the store's ETag of that version, recorded
-- when an upload completed or a whole read hashed to the address; a client's read asks the
-- store for that version only (If-Match), so an object changed in the bucket since is refused
-- instead of served. `location` names the store (endpoint, bucket and prefix): a new bucket
-- starts with no pins. Appended only — the newest row of an object (the largest pin_id) is
-- its pin — so deploy/postgres-roles.sql's defaults for a later table (SELECT and INSERT for
-- coffer_app, USAGE of its sequence) are all it needs. Not part of the ledger: a pin is
-- re-learnt by reading the object whole, and losing one only loses that check until then.
CREATE TABLE content_pins (
    pin_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    location text NOT NULL,
    sha256 text NOT NULL CHECK (length(sha256) = 64),
    tag text NOT NULL CHECK (length(tag) BETWEEN 1 AND 256),
    pinned_at double precision NOT NULL
);
CREATE INDEX content_pins_object ON content_pins (location, sha256, pin_id);
