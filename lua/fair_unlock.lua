-- fair_unlock: give back one hold of the fair lock; the last one deletes the lock
-- and wakes the head of the queue only, on its own channel.
-- KEYS[1]  the lock: HASH { <owner>: hold count }                 (N)
-- KEYS[2]  wait queue: LIST of owners                             (redisson_lock_queue:{N})
-- KEYS[3]  waiter deadlines: ZSET owner -> server ms              (redisson_lock_timeout:{N})
-- KEYS[4]  release channel (N's; the head's own channel is this name with
--          ':<owner>' appended, the one name not in KEYS: the script learns the
--          owner only from the queue; it shares KEYS[4]'s hash tag, so its slot)
-- ARGV[1]  lease in ms, re-armed while holds remain
-- ARGV[2]  owner
-- ARGV[3]  publish command: 'publish', or 'spublish' on a cluster
-- ARGV[4]  message ('0')
-- ARGV[5]  optional: the owner's count this call expects (see mutex_unlock)
-- Reply    {n, woken}: n is the holds left (0: released), -1 the owner holds nothing,
--          -2 the count differs from ARGV[5]; woken is 1 when a head was told
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- purge from the head, by Redisson's rule (see fair_lock)
while true do
  local first = redis.call('lindex', KEYS[2], 0)
  local score = first and redis.call('zscore', KEYS[3], first)
  if not first or (score and tonumber(score) > now) then
    break
  end
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], first)
end

local holds = redis.call('hget', KEYS[1], ARGV[2])
if not holds then
  return {-1, 0}
end
if ARGV[5] and tonumber(holds) ~= tonumber(ARGV[5]) then
  return {-2, 0}
end
holds = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if holds > 0 then
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {holds, 0}
end
redis.call('del', KEYS[1])
local head = redis.call('lindex', KEYS[2], 0)
if head then
  redis.call(ARGV[3], KEYS[4] .. ':' .. head, ARGV[4])
  return {0, 1}
end
return {0, 0}
