-- prelude_readers: joined by the build in front of the read-write lock scripts that
-- change holds (a script asks for it with the line '--#include prelude_readers.lua',
-- after prelude_guard).

-- The lock's mode (nil: free) and owner's read and write holds.  Fails on counts
-- that are no numbers, so a caller reads the lock before it writes.
local function read_holds(lock, owner)
  local v = redis.call('hmget', lock, 'mode', owner, owner .. ':write')
  local reads, writes = tonumber(v[2] or '0'), tonumber(v[3] or '0')
  if not (reads and writes) then
    error(redis.error_reply("ERR key '" .. lock .. "' holds a count of " .. owner ..
                            " that is no number"))
  end
  return v[1], reads, writes
end

-- live_holds(now, lock, readers, writers, channel, publish, owner, also, kind)
--   now      server time in ms, from TIME
--   lock     the lock: HASH { mode, <owner>: read holds, <owner>:write: write holds }
--   readers  live readers: ZSET owner -> end of its lease, server ms
--   writers  waiting writers: ZSET owner -> deadline, server ms
--   channel  release channel; publish: the publish command, as notify (prelude_publish) takes it
--   owner    the caller's owner
--   also     nil, or a key the caller touches only after this call, whose type
--            (kind) is checked before anybody is dropped
-- Returns the lock's mode (nil: free) and owner's read and write holds, as they are
-- once the dead are dropped: the waiting writers whose deadline passed and the
-- readers whose lease ended.  A reader that died stops counting once its lease
-- ends, a writer that died stops keeping readers out once its window ends.  When
-- no holder is left (only 'mode'), the lock is deleted and every waiter told, as a
-- last release would.
-- The lock is read first, then readers and writers, before anything is written
-- (prelude_guard); the usual call drops nobody and writes nothing.
local function live_holds(now, lock, readers, writers, channel, publish, owner, also,
                          kind)
  local mode, reads, writes = read_holds(lock, owner)
  local dead = redis.call('zrangebyscore', readers, '-inf', now)
  local late = redis.call('zcount', writers, '-inf', now)
  if #dead == 0 and late == 0 then
    return mode, reads, writes
  end
  if also then
    want(also, kind)
  end
  if late > 0 then
    redis.call('zremrangebyscore', writers, '-inf', now)
  end
  if #dead == 0 then
    return mode, reads, writes
  end
  for i = 1, #dead do
    redis.call('hdel', lock, dead[i])
  end
  redis.call('zremrangebyscore', readers, '-inf', now)
  if redis.call('hlen', lock) == 1 then
    redis.call('del', lock, readers)
    notify(publish, channel, '1')
  end
  return read_holds(lock, owner)
end
