-- prelude_publish: joined by the build in front of the scripts that tell waiters
-- ('--#include prelude_publish.lua').
-- notify(how, channel, message)
--   how      'publish' (one server, Sentinel, a cluster with ?pubsub=plain),
--            'spublish' (a cluster with ?pubsub=sharded), or 'spublish+publish'
--            (a cluster by default): the message goes both ways, so that clients
--            listening by SSUBSCRIBE (Redisson from 3.22) and by SUBSCRIBE (older
--            lines, or shardedSubscriptionMode off) all hear it
-- Returns the subscribers reached; both ways, the larger count, since a distlock
-- subscriber listens both ways on one connection and would be counted twice.
local function notify(how, channel, message)
  if how ~= 'spublish+publish' then
    return redis.call(how, channel, message)
  end
  local sharded = redis.call('spublish', channel, message)
  local plain = redis.call('publish', channel, message)
  return math.max(sharded, plain)
end
