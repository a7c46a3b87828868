-- prelude_readers: joined by the build in front of the read-write lock scripts that
-- change holds (a script asks for it with the line '--#include prelude_readers.lua').
-- reap_dead_readers(now, lock, readers, writers, channel, publish)
--   now      server time in ms, from TIME
--   lock     the lock: HASH { mode, <owner>: read holds, <owner>:write: write holds }
--   readers  live readers: ZSET owner -> end of its lease, server ms
--   writers  waiting writers: ZSET owner -> deadline, server ms
--   channel  release channel; publish: the publish command, as notify (prelude_publish) takes it
-- Drops the waiting writers whose deadline passed and the readers whose lease ended:
-- a reader that died stops counting once its lease ends, a writer that died stops
-- keeping readers out once its window ends.  When no holder is left (only 'mode'),
-- the lock is deleted and every waiter told, as a last release would.
local function reap_dead_readers(now, lock, readers, writers, channel, publish)
  redis.call('zremrangebyscore', writers, '-inf', now)
  local dead = redis.call('zrangebyscore', readers, '-inf', now)
  if #dead > 0 then
    for i = 1, #dead do
      redis.call('hdel', lock, dead[i])
    end
    redis.call('zremrangebyscore', readers, '-inf', now)
    if redis.call('hlen', lock) == 1 then
      redis.call('del', lock, readers)
      notify(publish, channel, '1')
    end
  end
end
