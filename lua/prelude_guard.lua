-- prelude_guard: joined by the build in front of every script, first
-- ('--#include prelude_guard.lua').  Redis keeps what a script wrote before a
-- command of it failed, so every script does all its work or none by this rule:
-- each command that can fail (one on a key of another type, or on a value that
-- is no number) comes before the first write.  A script touches each of its keys
-- with a read before it writes anything, or, where that would cost a command on
-- its usual path, orders its writes so that the one that can fail comes first;
-- only rare paths (a purge of dead waiters) check a type with want() before
-- they write.  A failing script has then changed nothing, which is what the
-- library takes an error reply to mean.

-- The error reply for key, of type kind where one of type wanted belongs.
local function wrong_type(key, kind, wanted)
  return redis.error_reply("WRONGTYPE key '" .. key .. "' is a " .. kind ..
                           ", not a " .. wanted .. " (another program's key," ..
                           " or a name that collides); nothing was changed")
end

-- Fails, naming key, unless key is of type wanted or absent.  For a key that a
-- script would otherwise first touch after it has written.
local function want(key, wanted)
  local kind = redis.call('type', key)['ok']
  if kind ~= wanted and kind ~= 'none' then
    error(wrong_type(key, kind, wanted))
  end
end

-- Fails, naming key, when a value read from it is not the number it must be.
local function number_in(key, v)
  local n = tonumber(v)
  if not n then
    error(redis.error_reply("ERR key '" .. key .. "' holds '" .. tostring(v):sub(1, 32) ..
                            "', not a number; nothing was changed"))
  end
  return n
end

-- Whether err, caught from a command, says a key is of another type.
local function is_wrong_type(err)
  return type(err) == 'string' and err:sub(1, 10) == 'WRONGTYPE '
end

-- guarded(types, body): body's reply.  When a command in body fails on a key of
-- another type, the reply names the first key of another type than types gives
-- for it (types[i] for KEYS[i], '' for a channel or a key of any type;
-- types.rest for the keys after those listed).  Other errors pass as they are.
local function guarded(types, body)
  local ok, res = pcall(body)
  if ok then
    return res
  end
  if is_wrong_type(res) then
    for i = 1, #KEYS do
      local wanted = types[i] or types.rest or ''
      if wanted ~= '' then
        local kind = redis.call('type', KEYS[i])['ok']
        if kind ~= wanted and kind ~= 'none' then
          return wrong_type(KEYS[i], kind, wanted)
        end
      end
    end
  end
  -- Redis's own errors keep their code (READONLY, OOM: the library acts on
  -- them); a Lua error gets ERR, as it would without the guard
  if type(res) == 'string' and res:match('^[A-Z]+ ') then
    error({err = res})
  end
  error(res, 0)
end
