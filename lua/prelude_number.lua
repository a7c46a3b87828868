-- prelude_number: joined by the build in front of the scripts that read counts
-- they must check before they write ('--#include prelude_number.lua'; see
-- prelude_guard for the rule).

-- v as a number; fails, naming key, when it is none.
local function number_in(key, v)
  local n = tonumber(v)
  if not n then
    error(redis.error_reply("ERR key '" .. key .. "' holds '" ..
                            tostring(v):sub(1, 32) .. "', not a number"))
  end
  return n
end
