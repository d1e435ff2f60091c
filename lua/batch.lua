-- leasehold batch (DESIGN §4): the one script leasehold sends, by EVALSHA. Its source is
-- owner.lua, acquire.lua, renew.lua, release.lua and inspect.lua (each defines one local
-- function), then this file, which runs a list of items — one or many operations on any leases — in
-- order, atomically as a whole.
--
-- ARGV[1] is the call's id, echoed first in the reply: a client that reads a reply meant
-- for another call (a connection whose stream lost bytes) sees the wrong id and trusts
-- none of it. Then KEYS and ARGV hold the items one after the other, ARGV naming each
-- item's kind:
--   acquire  KEYS lease, fence   ARGV 'A', owner, op, ttl_ms
--   renew    KEYS lease          ARGV 'N', owner, op, ttl_ms
--   release  KEYS lease          ARGV 'R', owner, op, channel
--   inspect  KEYS lease          ARGV 'I', owner, op
--
-- Reply: {id, reply of item 1, reply of item 2, …}: each item's reply as its file lists
-- it, or an error reply if that item raised one (say NOPERM or WRONGTYPE on its key). An
-- item that raised may have written before it did; the items around it ran regardless, so
-- one item's error is that item's, never its neighbours'.
--
-- Every item is checked to have its keys and arguments before any item runs: a batch with
-- a malformed item runs nothing and answers one error.

local kinds = {A = {2, 3}, N = {1, 3}, R = {1, 3}, I = {1, 2}}
local k, a = 1, 2
while a <= #ARGV do
  local shape = kinds[ARGV[a]]
  if not shape then
    return redis.error_reply('ERR leasehold batch: unknown item kind at ARGV ' .. a)
  end
  k, a = k + shape[1], a + 1 + shape[2]
end
if k ~= #KEYS + 1 or a ~= #ARGV + 1 then
  return redis.error_reply('ERR leasehold batch: keys and arguments do not match the items')
end

local now_us
local function now()
  if not now_us then
    local t = redis.call('TIME')
    now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return now_us
end

local function run(kind, at, ak)
  if kind == 'A' then
    return acquire(KEYS[at], KEYS[at + 1], ARGV[ak + 1], ARGV[ak + 2], ARGV[ak + 3], now)
  elseif kind == 'N' then
    return renew(KEYS[at], ARGV[ak + 1], ARGV[ak + 2], ARGV[ak + 3])
  elseif kind == 'R' then
    return release(KEYS[at], ARGV[ak + 1], ARGV[ak + 2], ARGV[ak + 3])
  end
  return inspect(KEYS[at], ARGV[ak + 1], ARGV[ak + 2])
end

local replies = {ARGV[1]}
k, a = 1, 2
while a <= #ARGV do
  local kind = ARGV[a]
  local ok, reply = pcall(run, kind, k, a)
  if not ok then
    -- Redis 7.0 raises a redis.call error as its text ('NOPERM …'), later versions as a
    -- table {err = …}; either way the error code stays first, for the client to classify.
    if type(reply) == 'table' and reply.err then
      reply = {err = reply.err}
    elseif type(reply) == 'string' and string.find(reply, '^%u[%u_]+ ') then
      reply = {err = reply}
    else
      reply = {err = 'ERR leasehold batch: ' .. tostring(reply)}
    end
  end
  replies[#replies + 1] = reply
  local shape = kinds[kind]
  k, a = k + shape[1], a + 1 + shape[2]
end
return replies
