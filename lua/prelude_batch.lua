-- prelude_batch: joined by the build in front of the watchdog scripts, which all take
-- the same batch ('--#include prelude_batch.lua'):
--   KEYS     for each entry, its keys, one after the other
--   ARGV[1]  the script's own argument (a lease or a window, in ms)
--   ARGV     then for each entry: its owner, and its number of keys
-- for_each_entry(fn) calls fn(owner, k, nkeys) for every entry, its keys being
-- KEYS[k .. k + nkeys - 1], and returns the reply: one integer per entry, 1 where fn
-- returned true, else 0.  An entry whose call fails (one of its keys is of another
-- type: its hold or place cannot be there) counts as 0 and leaves the others
-- alone: one broken lock must not stop the renewal of every other hold.  fn does
-- what can fail before it writes (prelude_guard), so such an entry changed nothing.
-- Any other failure (READONLY after a failover) fails the whole call.

-- Whether err, caught from a command, says a key is of another type.
local function is_wrong_type(err)
  return type(err) == 'string' and err:sub(1, 10) == 'WRONGTYPE '
end

local function for_each_entry(fn)
  local replies, k = {}, 1
  for e = 1, (#ARGV - 1) / 2 do
    local owner, nkeys = ARGV[2 * e], tonumber(ARGV[2 * e + 1])
    local ok, kept = pcall(fn, owner, k, nkeys)
    if not ok and not is_wrong_type(kept) then
      -- READONLY and the like keep their code, for the caller to act on
      error(tostring(kept):match('^[A-Z]+ ') and {err = kept} or kept, 0)
    end
    replies[e] = (ok and kept) and 1 or 0
    k = k + nkeys
  end
  return replies
end
