"""A private redis-server for the developer tools beside this file (lua_cost.py, lua_calls.py):
started on a free loopback port with persistence off, stopped by its PID when the `with`
block ends (also on error)."""
import contextlib, socket, subprocess, time
import redis


@contextlib.contextmanager
def scratch_redis():
    """Yields (client, cpu): a redis-py client, and a function returning Redis's CPU seconds
    so far (INFO cpu, sys + user)."""
    s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close()
    srv = subprocess.Popen(['redis-server', '--port', str(port), '--save', '', '--appendonly', 'no',
                            '--bind', '127.0.0.1'], stdout=subprocess.DEVNULL)
    try:
        r = redis.Redis(port=port)
        for _ in range(100):
            try:
                r.ping(); break
            except redis.ConnectionError:
                time.sleep(0.05)

        def cpu():
            i = r.info('cpu'); return i['used_cpu_sys'] + i['used_cpu_user']
        yield r, cpu
    finally:
        srv.terminate(); srv.wait()
