"""A private redis-server for the developer tools beside this file (lua_cost.py, lua_calls.py):
started on a free loopback port with persistence off, stopped by its PID when the `with`
block ends (also on error)."""
import contextlib, glob, os, socket, subprocess, tempfile, time
import redis


@contextlib.contextmanager
def scratch_redis(instructions=False):
    """Yields (client, cpu): a redis-py client, and a function returning Redis's CPU seconds
    so far (INFO cpu, sys + user) — or, with `instructions`, the instructions it ran
    so far (redis-server under valgrind's callgrind, user space only): the same for the same
    work whatever else the machine runs, where CPU time is not; about 50 times slower."""
    s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close()
    out = tempfile.mkdtemp()
    grind = ['valgrind', '--tool=callgrind', '--callgrind-out-file=' + out + '/cg.%p'] if instructions else []
    srv = subprocess.Popen(grind + ['redis-server', '--port', str(port), '--save', '', '--appendonly', 'no',
                            '--bind', '127.0.0.1'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        r = redis.Redis(port=port)
        for _ in range(600 if instructions else 100):
            try:
                r.ping(); break
            except redis.ConnectionError:
                time.sleep(0.05)

        def cpu():
            i = r.info('cpu'); return i['used_cpu_sys'] + i['used_cpu_user']

        so_far = [0]

        def counted():
            # A dump holds the count since the last one (callgrind_control -d zeroes it).
            before = set(glob.glob(out + '/cg.*'))
            subprocess.run(['callgrind_control', '-d', str(srv.pid)], capture_output=True, check=True)
            for _ in range(100):
                new = set(glob.glob(out + '/cg.*')) - before
                if new:
                    break
                time.sleep(0.05)
            time.sleep(0.2)
            (dump,) = new
            for line in open(dump):
                if line.startswith(('summary:', 'totals:')):
                    total = int(line.split()[1])
            os.remove(dump)
            so_far[0] += total
            return so_far[0]
        yield r, counted if instructions else cpu
    finally:
        srv.terminate(); srv.wait()
