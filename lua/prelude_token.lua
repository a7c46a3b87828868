-- prelude_token: joined by the build in front of the scripts that read or draw
-- fencing tokens ('--#include prelude_token.lua').  The counter is
-- redisson_lock_token:{N}, a STRING that Redisson's RFencedLock INCRs too, so
-- tokens from both clients grow together.
-- fencing_token(key, draw)
--   draw  false: the last token drawn (0 before the first); fails when the key
--         holds no number, so a caller reads it before it writes anything
--         true: a new token, larger than every one drawn before; it can fail (a
--         key that holds no counter), so a caller draws it before its other writes
local function fencing_token(key, draw)
  if draw then
    return redis.call('incr', key)
  end
  local v = redis.call('get', key)
  if v and not tonumber(v) then
    error(redis.error_reply("ERR key '" .. key .. "' holds '" .. v:sub(1, 32) ..
                            "', not a fencing counter"))
  end
  return tonumber(v or '0')
end
