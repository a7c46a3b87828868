-- prelude_token: joined by the build in front of the scripts that read or draw
-- fencing tokens ('--#include prelude_token.lua', after prelude_guard).  The
-- counter is redisson_lock_token:{N}, a STRING that Redisson's RFencedLock INCRs
-- too, so tokens from both clients grow together.

-- The last token drawn (0 before the first).  Fails, naming the key, when it
-- holds no counter: a caller reads it before it writes anything.
local function token_read(key)
  return number_in(key, redis.call('get', key) or '0')
end

-- A new token, larger than every one drawn before.  It can fail (a key that
-- holds no counter), so a caller draws it before its other writes.
local function token_draw(key)
  return redis.call('incr', key)
end
