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
-- counter Redisson moved ahead of the clock is simply counted on from.
--
-- Expiry (DISTLOCK_KEY_GRACE_MS): each draw sets the counter to live for the
-- hold's lease plus the grace, so a name nobody locks any more leaves no
-- counter behind.  A counter that expired restarts from the clock, and tokens
-- still rise: the last token drawn was at most the counter, which was at most
-- the clock at that draw plus A (how far draws, or Redisson's INCRs, had run
-- ahead of the clock; a draw takes more than a microsecond, so distlock alone
-- keeps A near 0), and the next draw comes at least lease + grace later, when
-- the clock is past that draw's clock by at least lease + grace.  So the next
-- token is larger as long as A < lease + grace (and the clocks of the servers
-- agree, as above).  Redisson's RFencedLock INCRs the counter instead of
-- drawing from the clock: after an expiry its INCR starts again at 1, below
-- every earlier token, and a fence refuses it; a fleet that mixes it with
-- distlock sets the grace to 0, which keeps the counter for ever (a draw then
-- clears an expiry an earlier draw set).
--
-- fencing_token(key, draw, keep)
--   draw  false: the last token drawn (0 before the first); fails when the key
--         holds no number, so a caller reads it before it writes anything
--         true: a new token, larger than every one drawn before, in TIME and
--         one SET that reads the counter as it writes the clock (GET option,
--         Redis 6.2; GET, TIME and SET before 6.2, or when the counter is
--         ahead of the clock).  A key of another type fails it before any
--         write; one that holds no number, or a counter past 2^53, fails it
--         with the key put back as it was but for its time to live, so a
--         caller draws it before its other writes
-- Returns the token, and with draw in the usual case (the clock's) its digits
-- too, as written: a caller that says the token in a message needs no float
-- formatted (string.format('%.0f') costs thousands of instructions).
--   keep  with draw: the counter's time to live in ms, a string: the lease
--         plus the grace, or '0' for ever
local TOKEN_MAX = 9007199254740991     -- 2^53 - 1: a Lua number is exact below

local function fencing_token(key, draw, keep)
  local t, clock, ok, v
  if draw then
    -- the clock as the token's digits, written in the one SET that reads the
    -- counter too (GET option, Redis 6.2): two commands, no float formatted
    t = redis.call('time')
    clock = t[1] .. ('00000'):sub(#t[2]) .. t[2]
    if keep ~= '0' then
      ok, v = pcall(redis.call, 'set', key, clock, 'px', keep, 'get')
    else
      ok, v = pcall(redis.call, 'set', key, clock, 'get')
    end
    -- the usual case: no counter, or one in digits below the clock's
    if ok and (not v or (v:find('^%d+$') and
                         (#v < #clock or (#v == #clock and v < clock)))) then
      return tonumber(t[1]) * 1000000 + tonumber(t[2]), clock
    end
    -- else the counter is ahead of the clock (Redisson's INCRs), or holds no
    -- number; or SET refused (another type: GET below fails as it; a server
    -- before 6.2: no GET option), and the counter is read, then written
  end
  if not ok then
    v = redis.call('get', key)
  end
  local last = tonumber(v or '0')
  if not last or (draw and last >= TOKEN_MAX) then
    if ok then
      redis.call('set', key, v) -- what the SET replaced, put back
    end
    if not last then
      error(redis.error_reply("ERR key '" .. key .. "' holds '" .. v:sub(1, 32) ..
                              "', not a fencing counter"))
    end
    error(redis.error_reply("ERR key '" .. key .. "' holds a fencing counter " ..
                            "past 2^53: no larger token can be drawn exactly"))
  end
  if not draw then
    return last
  end
  local token = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if token <= last then
    token = last + 1
  elseif ok then
    return token -- written already
  end
  if keep ~= '0' then
    redis.call('set', key, string.format('%.0f', token), 'px', keep)
  else
    redis.call('set', key, string.format('%.0f', token))
  end
  return token
end
