"""Redis CPU of leasehold's batch script per acquire -> release cycle, beside the native lock
shapes, at several items per call; and variants of the script with one feature taken out,
to see what each costs. Not part of CI: a developer's tool for docs/performance.md.

    pip install redis
    python3 benches/lua_cost.py .                 # 1, 4, 16, 32 items per call
    NS=16,32 SHORT=1 python3 benches/lua_cost.py . # short keys instead of leasehold's layout

Starts its own redis-server on a free loopback port (no persistence) and stops it by PID.
Each row is the median of 3 rounds of Redis CPU (INFO cpu, sys + user) divided by the
cycles; rounds of the shapes alternate, so all see the same background load.
"""
import os, sys, random
from scratch_redis import scratch_redis

root = sys.argv[1]
def src(name): return open(os.path.join(root, 'lua', name)).read()
BATCH = "\n".join(src(n) for n in ['owner.lua','line.lua','acquire.lua','renew.lua','release.lua','inspect.lua','batch.lua'])
variants = {
  'leasehold': BATCH,
  'no-acq-publish': BATCH.replace("redis.pcall('PUBLISH', channel(lease, ':acquired'), text)", ""),
}
variants['no-acq-publish,no-pcall'] = variants['no-acq-publish'].replace(
  "local ok, reply = pcall(run, kind, head, first[a], ARGV[a + 1])",
  "local ok, reply = true, run(kind, head, first[a], ARGV[a + 1])")
variants['no-release-publish'] = BATCH.replace("redis.pcall('PUBLISH', channel(lease, ':released'), 'released')", "")
# The line's check on a free lease (one ZRANGE of an empty line), as if there were no line.
variants['no-line'] = BATCH.replace("local may, in_line, next_id = entitled(line, id, 1, 1, now)", "local may, in_line, next_id = true, false, nil")
variants['no-fence'] = BATCH.replace("local last = tonumber(redis.call('SET', fence, text, 'GET'))", "local last = nil")
variants['no-publish-no-fence'] = variants['no-acq-publish'].replace("redis.pcall('PUBLISH', channel(lease, ':released'), 'released')", "").replace("local last = tonumber(redis.call('SET', fence, text, 'GET'))", "local last = nil")
# What the script call itself costs per cycle: the same keys and arguments, items that do
# nothing but answer.
variants['framing-only'] = "local out = {ARGV[1]} for a = 2, #ARGV, 2 do out[#out + 1] = 'RELEASED' end return out"
variants['lean-same-calls'] = r'''
local out = {ARGV[1]}
local now
local k = 1
for a = 2, #ARGV, 2 do
  local head, mine = ARGV[a], ARGV[a + 1]
  if string.byte(head) == 65 then
    local lease, fence = KEYS[k], KEYS[k + 1]
    k = k + 3
    local held = redis.call('GET', lease)
    if held then
      out[#out + 1] = 'CONTENDED'
    else
      if not now then local t = redis.call('TIME'); now = tonumber(t[1]) * 1000000 + tonumber(t[2]) end
      local token = now
      local last = tonumber(redis.call('SET', fence, token, 'GET'))
      if last and last >= token then token = last + 1; redis.call('SET', fence, token) end
      local text = string.format('%d', token)
      redis.call('SET', lease, mine .. text, 'PX', string.match(head, '^A(%d+)'))
      redis.pcall('PUBLISH', lease .. ':acquired', text)
      out[#out + 1] = 'ACQUIRED ' .. string.match(head, '^A(%d+)') .. ' ' .. text
    end
  else
    local lease = KEYS[k]
    k = k + 1
    local held = redis.call('GET', lease)
    if held and string.find(held, mine, 1, true) == 1 then
      redis.pcall('PUBLISH', lease .. ':released', 'released')
      redis.call('DEL', lease)
      out[#out + 1] = 'RELEASED'
    else
      out[#out + 1] = 'ABSENT'
    end
  end
end
return out
'''
for k, v in variants.items(): assert k == 'leasehold' or v != BATCH, k
assert variants['no-acq-publish'] != BATCH and variants['no-acq-publish,no-pcall'] != variants['no-acq-publish']

with scratch_redis() as (r, cpu):
    shas = {k: r.script_load(v) for k, v in variants.items()}
    relnat = r.script_load("if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0")
    arl_lock = r.script_load('for i = 1, #KEYS do if redis.call("EXISTS", KEYS[i]) > 0 then return 0 end end for i = 1, #KEYS do redis.call("SET", KEYS[i], ARGV[1], "PX", ARGV[2]) end return 1')
    mine = 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA bench '
    SHORT = os.environ.get('SHORT') == '1'
    def lkey(i):
        h = '%064x' % random.getrandbits(256)
        if SHORT:
            return 'l:{%s}:%s' % (h[:4], h[:12]), 'l:{%s}:f' % h[:4], 'l:{%s}:%s:l' % (h[:4], h[:12])
        lease = 'leasehold:lease:v2:bench:{%s}:%s' % (h[:4], h)
        return lease, 'leasehold:lease:v2:bench:{%s}:fence' % h[:4], lease + ':line'
    def leasehold(sha, n):
        keys = [lkey(i) for i in range(n)]
        akeys = [k for pair in keys for k in pair]
        aargs = ['1'] + [x for _ in keys for x in ('A30000 -0123456789abcdef', mine)]
        r.evalsha(sha, len(akeys), *akeys, *aargs)
        rkeys = [k for k, _, _ in keys]
        rargs = ['2'] + [x for _ in keys for x in ('R', mine)]
        out = r.evalsha(sha, len(rkeys), *rkeys, *rargs)
        assert all(o == b'RELEASED' for o in out[1:]), out[:3]
    def native(n):  # rslock / floor shape, pipelined: SET NX PX, then script GET+DEL
        keys = ['floor:%x' % random.getrandbits(64) for _ in range(n)]
        p = r.pipeline(transaction=False)
        for k in keys: p.set(k, 'tok', nx=True, px=30000)
        p.execute()
        p = r.pipeline(transaction=False)
        for k in keys: p.evalsha(relnat, 1, k, 'tok')
        p.execute()
    def arl(n):  # async-redis-lock shape: script EXISTS+SET, script GET+DEL
        keys = ['arl:%x' % random.getrandbits(64) for _ in range(n)]
        p = r.pipeline(transaction=False)
        for k in keys: p.evalsha(arl_lock, 1, k, 'tok', 30000)
        p.execute()
        p = r.pipeline(transaction=False)
        for k in keys: p.evalsha(relnat, 1, k, 'tok')
        p.execute()
    shapes = [('floor/rslock (SET NX PX + GET/DEL script)', native), ('async-redis-lock (2 scripts)', arl)]
    shapes += [(name, (lambda sha: lambda n: leasehold(sha, n))(sha)) for name, sha in shas.items()]
    for n in [int(x) for x in os.environ.get('NS', '1,4,16,32').split(',')]:
        rounds = max(200, 6000 // n)
        results = {name: [] for name, _ in shapes}
        for rep in range(3):
            for name, fn in shapes:
                c0 = cpu()
                for _ in range(rounds): fn(n)
                results[name].append((cpu() - c0) / (rounds * n) * 1e6)
        for name, _ in shapes:
            v = sorted(results[name])
            print(f"items/call={n:2d}  {name:45s} {v[1]:6.2f} us Redis CPU per cycle (median of 3; {v[0]:.2f}-{v[2]:.2f})")
        sys.stdout.flush()
