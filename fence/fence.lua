#!lua name=distlock
-- distlock's fence: the resource side of fencing tokens, as a Redis 7
-- function library.  Load it with `distlock fence load` (or FUNCTION LOAD
-- REPLACE with this file's text); call it from any client.
--
--   FCALL distlock_fenced 2 FENCE DATA TOKEN COMMAND [ARG...]
--     Runs COMMAND DATA ARG... only if TOKEN is not lower than the highest
--     token FENCE has accepted, and then records TOKEN.  A lower TOKEN gets
--     an error that starts with "STALE" and nothing changes.  A COMMAND that
--     fails changes nothing either (the token is not recorded).
--   FCALL_RO distlock_fence_get 1 FENCE
--     The highest token FENCE has accepted, 0 when none.
--
-- FENCE is a STRING holding that token.  On a cluster FENCE and DATA must
-- hash to one slot: give both the same hash tag, e.g. fence:{orders} and
-- {orders}:count.  Tokens are decimal integers from 0 to 2^63-1, compared
-- as integers exactly (never through a Lua number, which holds 53 bits).

local MAX_TOKEN = '9223372036854775807'

-- TOKEN in canonical form, or nil with a reason.
local function canonical(t)
  if type(t) ~= 'string' or not t:match('^%d+$') then
    return nil, 'is not a decimal integer'
  end
  t = t:gsub('^0+', '')
  if t == '' then t = '0' end
  if #t > #MAX_TOKEN or (#t == #MAX_TOKEN and t > MAX_TOKEN) then
    return nil, 'is above 2^63-1'
  end
  return t
end

-- a < b for canonical decimal strings.
local function lower(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end

-- The token FENCE holds, canonical, or an error reply when FENCE is not a
-- fence (another type, or a string that is no token).
local function accepted(fence)
  local t = redis.call('TYPE', fence)['ok']
  if t == 'none' then return '0' end
  if t ~= 'string' then
    return nil, 'ERR fence ' .. fence .. ' is a ' .. t .. ', not a fence'
  end
  local v, why = canonical(redis.call('GET', fence))
  if not v then
    return nil, 'ERR fence ' .. fence .. ' holds a value that ' .. why
  end
  return v
end

-- fn wrapped for register_function: a call that names other than n keys gets
-- the error usage instead.
local function taking_keys(n, usage, fn)
  return function(keys, args)
    if #keys ~= n then
      return redis.error_reply(usage)
    end
    return fn(keys, args)
  end
end

local function fenced(keys, args)
  if #args < 2 then
    return redis.error_reply('ERR distlock_fenced needs TOKEN COMMAND [ARG...]')
  end
  local token, why = canonical(args[1])
  if not token then
    return redis.error_reply('ERR token ' .. tostring(args[1]) .. ' ' .. why)
  end
  local last, err = accepted(keys[1])
  if not last then return redis.error_reply(err) end
  if lower(token, last) then
    return redis.error_reply('STALE token ' .. token .. ' is lower than ' ..
      last .. ', already accepted by ' .. keys[1] .. ': the lock was lost')
  end
  local reply = redis.pcall(args[2], keys[2], unpack(args, 3))
  if type(reply) == 'table' and reply.err then
    return reply
  end
  if token ~= last then
    redis.call('SET', keys[1], token, 'KEEPTTL')
  end
  return reply
end

local function fence_get(keys)
  local last, err = accepted(keys[1])
  if not last then return redis.error_reply(err) end
  return last
end

redis.register_function('distlock_fenced', taking_keys(2,
  'ERR distlock_fenced takes 2 keys: FENCE DATA', fenced))
redis.register_function{function_name = 'distlock_fence_get',
  callback = taking_keys(1, 'ERR distlock_fence_get takes 1 key: FENCE', fence_get),
  flags = {'no-writes'}}
