-- 0008_content_pins: the version of each object-store object whose bytes Coffer checked
-- against their address. `tag` is the store's ETag of that version, recorded when an upload
-- completed or a whole read hashed to the address; a client's read asks the store for that
-- version only (If-Match), so an object changed in the bucket since is refused instead of
-- served. `location` names the store (endpoint, bucket and prefix): a new bucket starts with
-- no pins. Appended only: the newest row of an object (the largest pin_id) is its pin. Not
-- part of the ledger: a pin is re-learnt by reading the object whole, and losing one only
-- loses that check until then.
CREATE TABLE content_pins (
    pin_id INTEGER PRIMARY KEY,
    location TEXT NOT NULL,
    sha256 TEXT NOT NULL CHECK (length(sha256) = 64),
    tag TEXT NOT NULL CHECK (length(tag) BETWEEN 1 AND 256),
    pinned_at REAL NOT NULL
);
CREATE INDEX content_pins_object ON content_pins (location, sha256, pin_id);
