-- distlock's fence for PostgreSQL: the resource side of fencing tokens.
--
--   psql -d DB -f /usr/share/distlock/fence.sql     (run again to upgrade)
--
-- In the transaction that writes what a distlock lock protects, call
--
--   SELECT distlock_fence('orders', 1764250000123456);
--
-- first, with the token of the hold (dist_mutex_token).  It records the
-- token for that resource and returns it; when a higher token was already
-- accepted for the resource it raises SQLSTATE DL001 with a message that
-- starts with "STALE", and the transaction must end (ROLLBACK): the lock was
-- lost, and a retry with the same token fails again.
--
-- The row of the resource stays locked until the transaction ends, so a
-- writer with a lower token that comes while a higher one is still open
-- waits for it, and fails when it commits (or goes on when it rolls back).
-- Under REPEATABLE READ or SERIALIZABLE such a writer gets a serialization
-- failure (40001) instead of DL001; either way its writes are not kept.
--
-- distlock_fence_get(resource) is the highest token accepted, 0 when none.

CREATE TABLE IF NOT EXISTS distlock_fence (
    resource text PRIMARY KEY,
    token bigint NOT NULL CHECK (token >= 0)
);

CREATE OR REPLACE FUNCTION distlock_fence(resource text, token bigint)
RETURNS bigint
LANGUAGE plpgsql
AS $fn$
DECLARE
    kept bigint;
BEGIN
    IF resource IS NULL OR token IS NULL OR token < 0 THEN
        RAISE EXCEPTION 'distlock_fence: resource and a token of 0 or more are needed'
            USING ERRCODE = '22023';
    END IF;
    -- The conflict path locks the row and re-reads its newest committed
    -- version, so the comparison below is made against whatever a
    -- concurrent writer committed while this one waited.
    INSERT INTO distlock_fence AS f (resource, token)
    VALUES (distlock_fence.resource, distlock_fence.token)
    ON CONFLICT ON CONSTRAINT distlock_fence_pkey
    DO UPDATE SET token = EXCLUDED.token WHERE f.token <= EXCLUDED.token
    RETURNING f.token INTO kept;
    IF NOT FOUND THEN
        SELECT f.token INTO kept FROM distlock_fence AS f
        WHERE f.resource = distlock_fence.resource;
        RAISE EXCEPTION 'STALE token % for resource "%": % already accepted, the lock was lost',
            distlock_fence.token, distlock_fence.resource, kept
            USING ERRCODE = 'DL001',
                  HINT = 'Roll back; do not retry with this token.';
    END IF;
    RETURN kept;
END
$fn$;

CREATE OR REPLACE FUNCTION distlock_fence_get(resource text)
RETURNS bigint
LANGUAGE sql STABLE
AS $fn$
    SELECT coalesce((SELECT f.token FROM distlock_fence AS f
                     WHERE f.resource = distlock_fence_get.resource), 0)
$fn$;
