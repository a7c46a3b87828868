-- prelude_guard: joined by the build in front of the scripts that check a key's
-- type or a number before they write ('--#include prelude_guard.lua', first).
-- Redis keeps what a script wrote before a command of it failed, so every script
-- does all its work or none by this rule: each command that can fail (one on a key
-- of another type, or on a value that is no number) comes before the first write.
-- A script reads each of its keys before it writes anything, or, where that would
-- cost a command on its usual path, orders its writes so that the one that can
-- fail comes first; only rare paths (a purge of dead waiters or readers) check a
-- type with want() before they write.  A failing script has then changed nothing,
-- which is what the library takes an error reply to mean.  Each script lists the
-- types of its KEYS on a '-- Types' line of its header ('-' for a channel or a key
-- of any type): the build hands it to the library, which names the key of another
-- type when Redis answers WRONGTYPE.  Every local function of a prelude costs each
-- call of the script a closure, so this one holds want() alone.

-- Fails with WRONGTYPE unless key is of type wanted or absent.  For a key that a
-- script would otherwise first touch after it has written.
local function want(key, wanted)
  local kind = redis.call('type', key)['ok']
  if kind ~= wanted and kind ~= 'none' then
    error(redis.error_reply("WRONGTYPE key '" .. key .. "' is a " .. kind ..
                            ", not a " .. wanted))
  end
end
