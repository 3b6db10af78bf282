-- 0005_attempts_product_index: GET /v1/audit/attempts?productId=… (and the attempts export
-- with that filter) had no index to use: every page read the whole attempts table, which
-- grows with every refused request. With this one a product's attempts are found directly,
-- in ledger order (an index on one column also holds the rowid, the sequence).
CREATE INDEX attempts_product_id ON attempts (product_id);
