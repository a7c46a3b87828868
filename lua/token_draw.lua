-- token_draw: a new fencing token for a hold that already exists, when the one
-- it showed may have been shown before (a hold the server counted twice after a
-- lost reply, whose surplus was shed).  The same rule as a new hold's draw.
-- KEYS[1]  fencing counter: STRING                                (redisson_lock_token:{N})
-- ARGV[1]  the counter's time to live in ms (the lease plus DISTLOCK_KEY_GRACE_MS),
--          '0': for ever
-- Reply    the new token
-- Types    string
--#include prelude_token.lua
return (fencing_token(KEYS[1], true, ARGV[1] or '0')) -- the token only
