-- rwlock_cancel: a waiting writer gives up (timeout, error): it stops being a waiting
-- writer at once, and if it was the last one, readers it kept out are told.
-- KEYS[1]  the lock                                               (N)
-- KEYS[2]  waiting writers: ZSET owner -> deadline, server ms     (distlock_rwlock_writers:{N})
-- KEYS[3]  release channel                                        (redisson_rwlock:{N})
-- ARGV[1]  owner
-- ARGV[2]  publish command
-- Reply    1 it was a waiting writer, 0 it was not
-- The lock is read before the writer leaves (prelude_guard).
-- Types    hash zset -
--#include prelude_publish.lua
local mode = redis.call('hget', KEYS[1], 'mode')
local removed = redis.call('zrem', KEYS[2], ARGV[1])
if removed == 1 and redis.call('exists', KEYS[2]) == 0 and mode ~= 'write' then
  notify(ARGV[2], KEYS[3], '1')
end
return removed
