-- leasehold inspect (DESIGN §4). Read only.
--
-- KEYS[1]  lease key
-- ARGV[1]  owner token
-- ARGV[2]  operation id
--
-- Replies (protocol::InspectReply):
--   {'HELD_BY_ATTEMPT', pttl_ms, token}  held by exactly this attempt
--   {'HELD_BY_OTHER',   pttl_ms, token}  held by someone else; the owner token stays here,
--                                        the fencing token is public (effect targets compare it)
--   {'ABSENT'}

local held = redis.call('HMGET', KEYS[1], 'o', 'p', 't')
if not held[1] then
  return {'ABSENT'}
end
local pttl = redis.call('PTTL', KEYS[1])
if held[1] == ARGV[1] and held[2] == ARGV[2] then
  return {'HELD_BY_ATTEMPT', pttl, tonumber(held[3])}
end
return {'HELD_BY_OTHER', pttl, tonumber(held[3])}
