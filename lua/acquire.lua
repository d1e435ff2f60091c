-- leasehold acquire (DESIGN §4). Atomic; run with EVALSHA.
--
-- KEYS[1]  lease key: hash {o = owner token, p = operation id, t = fencing token}, PX expiry
-- KEYS[2]  fence counter: the last token issued for this resource; no expiry
-- ARGV[1]  owner token (base64url)
-- ARGV[2]  operation id
-- ARGV[3]  ttl in milliseconds (integer, > 0)
--
-- Replies (status words match protocol::AcquireReply):
--   {'ACQUIRED',  ttl_ms,  token}  key was absent; now held by this attempt
--   {'REPLAYED',  pttl_ms, token}  this very attempt holds it; nothing changed (no TTL reset)
--   {'CONFLICT',  pttl_ms}         same owner token, other operation id
--   {'CONTENDED', pttl_ms}         another holder; its owner token never leaves Redis
--
-- Invariant (fencing): token = max(last + 1, server TIME in µs) is strictly greater than
-- every token issued before for this resource, also after the lease key expired, after the
-- counter key was evicted, and after a replica promotion that lost the last increment.
-- Tokens stay below 2^53 (the µs clock reaches that in the year 2255), so Lua doubles hold
-- them exactly; they are returned as Lua numbers, which Redis turns into integer replies.

local held = redis.call('HMGET', KEYS[1], 'o', 'p', 't')
if held[1] then
  local pttl = redis.call('PTTL', KEYS[1])
  if held[1] == ARGV[1] then
    if held[2] == ARGV[2] then
      return {'REPLAYED', pttl, tonumber(held[3])}
    end
    return {'CONFLICT', pttl}
  end
  return {'CONTENDED', pttl}
end

local now = redis.call('TIME')
local now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
local token = (tonumber(redis.call('GET', KEYS[2])) or 0) + 1
if now_us > token then
  token = now_us
end
local token_text = string.format('%d', token)
redis.call('SET', KEYS[2], token_text)
redis.call('HSET', KEYS[1], 'o', ARGV[1], 'p', ARGV[2], 't', token_text)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {'ACQUIRED', tonumber(ARGV[3]), token}
