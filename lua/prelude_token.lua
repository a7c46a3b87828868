-- prelude_token: joined by the build in front of the scripts that read or draw
-- fencing tokens ('--#include prelude_token.lua').  The counter is
-- redisson_lock_token:{N}, a STRING that Redisson's RFencedLock INCRs too, so
-- tokens from both clients make one rising sequence.
--
-- A token drawn is one more than the counter and at least the server's clock
-- in microseconds (TIME): so tokens still rise when the counter itself went
-- back, which a restart without data does (it starts from nothing), and a
-- failover to a replica that had not received the last draws (its counter is
-- behind), as long as the clock of the server that draws is not behind the
-- clock of the one that drew before by more than the time between the two
-- draws (a failover takes seconds; NTP keeps hosts within milliseconds).  A
-- counter Redisson moved ahead of the clock is simply counted on from.  The
-- counter keeps whatever expiry it has (none unless an operator set one).
--
-- fencing_token(key, draw)
--   draw  false: the last token drawn (0 before the first); fails when the key
--         holds no number, so a caller reads it before it writes anything
--         true: a new token, larger than every one drawn before; it reads the
--         key before it writes it, so it fails (a key that holds no counter)
--         before any write, and a caller draws it before its other writes
local TOKEN_MAX = 9007199254740991     -- 2^53 - 1: a Lua number is exact below

local function fencing_token(key, draw)
  local v = redis.call('get', key)
  local last = tonumber(v or '0')
  if not last then
    error(redis.error_reply("ERR key '" .. key .. "' holds '" .. v:sub(1, 32) ..
                            "', not a fencing counter"))
  end
  if not draw then
    return last
  end
  if last >= TOKEN_MAX then
    error(redis.error_reply("ERR key '" .. key .. "' holds a fencing counter " ..
                            "past 2^53: no larger token can be drawn exactly"))
  end
  local t = redis.call('time')
  local token = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if token <= last then
    token = last + 1
  end
  redis.call('set', key, string.format('%.0f', token), 'keepttl')
  return token
end
