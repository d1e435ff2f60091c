"""Render docs/grafana/leasehold.png: what the Grafana dashboard leasehold.json shows, drawn
from a real run of `leasehold run` processes.

Run it from the repository root, after `cargo build -p leasehold-cli` (or name the binary):

    python3 docs/grafana/render_preview.py [--leasehold target/debug/leasehold]
                                           [--out docs/grafana/leasehold.png]

It needs redis-server on PATH, matplotlib and redis-py (`pip install matplotlib redis`, in a
venv if you like), and takes about a minute.

What it does:

1. Starts a private redis-server on a free loopback port (benches/scratch_redis.py: no
   persistence, stopped by its PID at the end, also on error).
2. Plays a scenario of about 60 s with six `leasehold run` processes, each serving Prometheus
   text with --metrics-addr: holders of build-a, build-b, build-c (purpose `build`, ttl 6 s)
   and of deploy-eu, deploy-us (purpose `deploy`, ttl 9 s), renewing every second (deploy-us
   every 500 ms), each running a command that takes 1 s to wind down on SIGTERM; then a waiter
   (--wait 60s) queues behind the holder of build-a. Every holder but deploy-us runs with
   LEASEHOLD_COMMAND_TIMEOUT=2s; deploy-us keeps the default, 200 ms. Then:
     * handoff (15 s):      the holder of build-a gets SIGTERM; it releases and the waiter,
                            woken by the release notice, takes over;
     * key deleted (25 s):  the lease key of build-c is deleted (redis DEL of the key that
                            `leasehold inspect --json` names); its holder's next renewal finds
                            it LOST, the command is stopped and leasehold exits 124;
     * Redis paused (35 s): CLIENT PAUSE 1500 WRITE. It delays one renewal of every holder;
                            those with a 2 s command timeout are confirmed late, with less
                            validity left (the renew margin dips); deploy-us's renewal times
                            out (three attempts of 200 ms: indeterminate), its lease is
                            UNKNOWN, the command is stopped and leasehold exits 124;
   and the other commands end on their own.
3. Scrapes every process's /metrics every 500 ms, as Prometheus would with that scrape
   interval: a process that is not (or no longer) serving contributes nothing from that scrape
   on (its series go stale). Each process's `instance` label is its role in the scenario, as a
   relabelling rule would set it.
4. Evaluates every query of leasehold.json the way Prometheus does (`rate`/`increase` with
   Prometheus's extrapolation, `sum`/`min`/`max by`) at a 500 ms step with
   $__rate_interval = 2 s (four scrape intervals, as Grafana computes it), applies each
   target's legendFormat, and draws every panel where its gridPos puts it, under the row
   titles, with the scenario's events marked on every time axis (the handoff where the
   waiter's log says it acquired).
5. Prints the run's key figures: exit statuses, the handoff as the logs saw it, what the
   waiter's metrics say of its wait, the lowest renew margin before and during the pause.
   It exits 1, after drawing, when a process did not end with its planned exit status.

What a reader of the picture should know, as of a Prometheus behind Grafana:
  * rate() and increase() cannot tell that a series which first appears with value 1 was 0
    before: a counter created by its first increment shows no increase. leasehold creates
    its event counters (cancellations, renewals lost/indeterminate/unavailable, transitions
    into lost/unknown) at 0 with a purpose's first lease, so those show; a waiter's one
    acquisition does not.
  * A process's last events (its release, as it exits) happen after its last scrape.
  * The exporter's summaries (quantile="…") cover the last 40 to 60 s (three buckets of 20 s):
    a dip in the lowest renew margin stays on the graph that long, and the p99 of that many
    renewals does not show one slow renewal.

--record FILE keeps the scrapes and events as JSON; --replay FILE draws from such a recording
without running anything (for adjusting the drawing).
"""
import argparse
import contextlib
import json
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime
from pathlib import Path

import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402 (after choosing the backend)
from matplotlib.ticker import FuncFormatter, MaxNLocator, MultipleLocator  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / 'docs' / 'grafana' / 'leasehold.json'
sys.path.insert(0, str(REPO / 'benches'))

SCRAPE_INTERVAL = 0.5
RATE_INTERVAL = 4 * SCRAPE_INTERVAL  # Grafana's $__rate_interval for this scrape interval
STEP = SCRAPE_INTERVAL               # Grafana's $__interval, bounded below by the scrape interval
LOOKBACK = 300.0                     # Prometheus's default lookback for instant selectors

# A command that works for a while, and takes 1 s to wind down on SIGTERM (long enough for a
# scrape to see the state of a process whose lease was cancelled).
WORKER = 'trap "sleep 1; exit 143" TERM; sleep {seconds} & wait $!'

# Every holder renews every second or faster, so the 1.5 s pause surely delays one renewal of
# each (the default, ttl/3, could miss it). A renewal makes up to three attempts of one
# command timeout each: with LEASEHOLD_COMMAND_TIMEOUT=2s it waits the pause out and is
# confirmed late, with less validity left; deploy-us keeps the default timeout (200 ms: about
# 0.6 s for the three attempts) and renews every 500 ms, so the pause catches a renewal with
# more than a second of it left, which cannot be confirmed: the lease is UNKNOWN.
PATIENT = {'LEASEHOLD_COMMAND_TIMEOUT': '2s'}
EVERY_SECOND = ['--renew-every', '1s']
HOLDERS = {
    # name: purpose, resource, --ttl, other options, environment, how long the command runs
    # (s) from its start, the exit status expected
    'build-a': ('build', 'build-a', '6s', EVERY_SECOND, PATIENT, 60, 143),
    'build-b': ('build', 'build-b', '6s', EVERY_SECOND, PATIENT, 50, 0),
    'build-c': ('build', 'build-c', '6s', EVERY_SECOND, PATIENT, 60, 124),
    'deploy-eu': ('deploy', 'deploy-eu', '9s', EVERY_SECOND, PATIENT, 52, 0),
    'deploy-us': ('deploy', 'deploy-us', '9s', ['--renew-every', '500ms'], {}, 45, 124),
    'build-a (waiter)': ('build', 'build-a', '6s', EVERY_SECOND + ['--wait', '60s'], PATIENT,
                         40, 0),
}
SCHEDULE = [
    (1.0, 'start', 'build-a'),
    (1.5, 'start', 'build-b'),
    (2.0, 'start', 'build-c'),
    (2.5, 'start', 'deploy-eu'),
    (3.0, 'start', 'deploy-us'),
    (6.0, 'start', 'build-a (waiter)'),
    (15.0, 'sigterm', 'build-a'),  # the handoff: build-a's holder releases, the waiter takes over
    (25.0, 'delete key', 'build-c'),
    (35.0, 'pause redis', 1500),
]
EVENT_LABELS = {'handoff': 'handoff', 'delete key': 'key deleted',
                'pause redis': 'Redis paused'}
END_AFTER_LAST_EXIT = 2.0


def free_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ---------------------------------------------------------------- the run

class Scraper:
    """Scrapes each target on a thread of its own every SCRAPE_INTERVAL, as Prometheus does (a
    slow target delays no other), into `scrapes`: {'t': when the scrape started, 'instance',
    'series': [[name, labels, value], ...], or None when the scrape failed}."""

    def __init__(self):
        self.scrapes = []
        self.stop = threading.Event()
        self.threads = []

    def add(self, instance, url):
        thread = threading.Thread(target=self.scrape_every_interval, args=(instance, url))
        thread.start()
        self.threads.append(thread)

    def scrape_every_interval(self, instance, url):
        due = time.time()
        while not self.stop.is_set():
            self.scrapes.append({'t': time.time(), 'instance': instance, 'series': scrape(url)})
            due += SCRAPE_INTERVAL
            self.stop.wait(max(0.0, due - time.time()))

    def close(self):
        self.stop.set()
        for thread in self.threads:
            thread.join()


def scrape(url):
    try:
        with urllib.request.urlopen(url, timeout=SCRAPE_INTERVAL) as reply:
            return parse_exposition(reply.read().decode())
    except OSError:
        return None


LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_exposition(text):
    series = []
    for line in text.splitlines():
        if not line or line.startswith('#'):
            continue
        head, value = line.rsplit(' ', 1)
        name, _, labels = head.partition('{')
        series.append([name, dict(LABEL.findall(labels)), float(value)])
    return series


def run_scenario(leasehold):
    """Plays SCHEDULE; returns the recording: scrapes, events, exit statuses, log lines."""
    from scratch_redis import scratch_redis
    procs, logs = {}, {}
    scraper = Scraper()
    with tempfile.TemporaryDirectory() as tmp, scratch_redis() as (r, _cpu):
        url = 'redis://127.0.0.1:%d' % r.connection_pool.connection_kwargs['port']
        t0 = time.time()
        events = []
        try:
            for at, action, what in SCHEDULE:
                time.sleep(max(0.0, t0 + at - time.time()))
                if action == 'start':
                    purpose, resource, ttl, options, env, seconds, _ = HOLDERS[what]
                    port = free_port()
                    logs[what] = Path(tmp) / ('%s.log' % what.replace(' ', '_'))
                    argv = [leasehold, '--log-format', 'json', '--log-level', 'info', 'run',
                            '--redis', url, '--purpose', purpose, '--resource', resource,
                            '--ttl', ttl, '--metrics-addr', '127.0.0.1:%d' % port, *options,
                            '--', 'sh', '-c', WORKER.format(seconds=seconds)]
                    with open(logs[what], 'w') as log:
                        procs[what] = subprocess.Popen(argv, stderr=log, stdout=subprocess.DEVNULL,
                                                       env=dict(os.environ, **env))
                    scraper.add(what, 'http://127.0.0.1:%d/metrics' % port)
                    continue
                if action == 'sigterm':
                    procs[what].terminate()
                elif action == 'delete key':
                    purpose, resource = HOLDERS[what][:2]
                    shown = subprocess.run([leasehold, 'inspect', '--redis', url, '--purpose',
                                            purpose, '--resource', resource, '--json'],
                                           capture_output=True, text=True, check=True)
                    deleted = r.delete(json.loads(shown.stdout)['key'])
                    assert deleted == 1, 'the lease key of %s was not there' % what
                elif action == 'pause redis':
                    r.client_pause(what, all=False)  # CLIENT PAUSE <ms> WRITE
                events.append({'t': time.time(), 'action': action, 'what': what})
            for proc in procs.values():
                proc.wait(timeout=120)
            time.sleep(END_AFTER_LAST_EXIT)
        finally:
            scraper.close()
            for proc in procs.values():  # only after an error: stop what is left, by PID
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        logs = {name: path.read_text().splitlines() for name, path in logs.items()}
        acquired = log_time(logs, 'build-a (waiter)', 'lease acquired')
        if acquired:
            events.append({'t': acquired.timestamp(), 'action': 'handoff', 'what': 'build-a'})
        return {'t0': t0, 'end': time.time(), 'scrapes': scraper.scrapes, 'events': events,
                'exits': {name: proc.returncode for name, proc in procs.items()}, 'logs': logs}


# ---------------------------------------------------------------- the queries

QUERY = re.compile(r'^(sum|min|max) by \(([^)]*)\) \((?:(rate|increase)\()?(\w+)'
                   r'(?:\{([^}]*)\})?(?:\[\$__rate_interval\]\))?\)$')
MATCHER = re.compile(r'(\w+)(=~|=)"([^"]*)"')


def parse_query(expr):
    """The shape every dashboard query has: AGG by (LABELS) ([FN(]NAME{MATCHERS}[[range])])."""
    m = QUERY.match(expr)
    if not m:
        raise SystemExit('a query this script cannot evaluate: %s' % expr)
    agg, by, fn, name, matchers = m.groups()
    equal = {k: v for k, op, v in MATCHER.findall(matchers or '') if op == '='}
    for k, op, v in MATCHER.findall(matchers or ''):
        if op == '=~' and v != '$purpose':
            raise SystemExit('a matcher this script cannot evaluate: %s' % expr)
    return agg, [label.strip() for label in by.split(',')], fn, name, equal


def by_instance(scrapes):
    out = {}
    for s in scrapes:
        out.setdefault(s['instance'], []).append(s)
    return out


def selected(scrape, name, equal):
    for series_name, labels, value in scrape['series']:
        if series_name == name and all(labels.get(k) == v for k, v in equal.items()):
            yield labels, value


def instant(per_instance, name, equal, t):
    """Each matching series' value at t: from the instance's last scrape at or before t,
    unless that scrape failed (the series are stale)."""
    for instance, scrapes in per_instance.items():
        last = None
        for s in scrapes:
            if s['t'] > t:
                break
            last = s
        if last is None or last['series'] is None or t - last['t'] > LOOKBACK:
            continue
        for labels, value in selected(last, name, equal):
            yield dict(labels, instance=instance), value


def extrapolated(points, start, end, is_rate):
    """Prometheus's rate()/increase() of one counter's samples in (start, end]."""
    if len(points) < 2:
        return None
    delta, previous = 0.0, points[0][1]
    for _, v in points[1:]:
        delta += v if v < previous else v - previous  # a reset starts again from zero
        previous = v
    sampled = points[-1][0] - points[0][0]
    average = sampled / (len(points) - 1)
    to_start, to_end = points[0][0] - start, end - points[-1][0]
    if delta > 0 and points[0][1] >= 0:
        to_start = min(to_start, sampled * points[0][1] / delta)  # a counter is never < 0
    threshold = average * 1.1
    span = sampled
    span += to_start if to_start < threshold else average / 2
    span += to_end if to_end < threshold else average / 2
    result = delta * span / sampled
    return result / (end - start) if is_rate else result


def ranged(per_instance, name, equal, t, fn):
    """fn(NAME{…}[RATE_INTERVAL]) at t, for each series."""
    start = t - RATE_INTERVAL
    for instance, scrapes in per_instance.items():
        points = {}
        for s in scrapes:
            if start < s['t'] <= t and s['series'] is not None:
                for labels, value in selected(s, name, equal):
                    key = tuple(sorted(labels.items()))
                    points.setdefault(key, []).append((s['t'], value))
        for key, series_points in points.items():
            value = extrapolated(series_points, start, t, fn == 'rate')
            if value is not None:
                yield dict(dict(key), instance=instance), value


AGGREGATE = {'sum': sum, 'min': min, 'max': max}


def evaluate(expr, per_instance, times):
    """{label tuple: [value or NaN at each time]} for one dashboard query."""
    agg, by, fn, name, equal = parse_query(expr)
    lines = {}
    for i, t in enumerate(times):
        if fn:
            samples = ranged(per_instance, name, equal, t, fn)
        else:
            samples = instant(per_instance, name, equal, t)
        groups = {}
        for labels, value in samples:
            groups.setdefault(tuple(labels.get(label, '') for label in by), []).append(value)
        for group, values in groups.items():
            lines.setdefault(group, [math.nan] * len(times))[i] = AGGREGATE[agg](values)
    return by, lines


def legend(fmt, by, group):
    labels = dict(zip(by, group))
    return re.sub(r'\{\{\s*(\w+)\s*\}\}', lambda m: labels.get(m.group(1), ''), fmt).strip()


# ---------------------------------------------------------------- the picture

BACKGROUND, PANEL, GRID, TEXT, DIM = '#111217', '#181b1f', '#2c3235', '#ccccdc', '#8e8e8e'
PALETTE = ['#73bf69', '#f2cc0c', '#5794f2', '#ff9830', '#f2495c', '#b877d9', '#70dbed',
           '#fade2a', '#e0b400', '#c4162a', '#1f60c4', '#8f3bb8']
EVENT_COLOR = '#e02f44'


def unit_formatter(unit):
    """Tick labels in the panel's unit, roughly as Grafana writes them."""
    def seconds(v, _pos=None):
        if v == 0:
            return '0'
        return '%g ms' % round(v * 1000, 1) if abs(v) < 1 else '%g s' % round(v, 2)

    def ops(v, _pos=None):
        return '%g ops/s' % round(v, 2) if v else '0'

    return FuncFormatter({'s': seconds, 'ops': ops}.get(unit, lambda v, _pos=None: '%g' % v))


WIDTH, ROW, HEADER = 15.0, 0.36, 0.55  # inches: the figure, one grid row, the title bar
GAP, TITLE, Y_LABELS, X_LABELS, LEGEND_LINE = 0.05, 0.32, 0.75, 0.28, 0.2


def draw(recording, out):
    dashboard = json.loads(DASHBOARD.read_text())
    t0 = recording['t0']
    times = [t0 + i * STEP for i in range(int((recording['end'] - t0) / STEP) + 1)]
    xs = [t - t0 for t in times]
    per_instance = by_instance(recording['scrapes'])
    events = sorted((e['t'] - t0, e['action'], e['what']) for e in recording['events']
                    if e['action'] in EVENT_LABELS)

    rows = max(p['gridPos']['y'] + p['gridPos']['h'] for p in dashboard['panels'])
    height = HEADER + rows * ROW
    fig = plt.figure(figsize=(WIDTH, height), facecolor=BACKGROUND)

    def rect(x, y, w, h):
        """Figure coordinates of a box given in inches from the top left."""
        return [x / WIDTH, 1 - (y + h) / height, w / WIDTH, h / height]

    fig.text(0.006, 1 - HEADER / 2 / height, dashboard['title'], color=TEXT, fontsize=15,
             weight='bold', va='center')
    fig.text(0.994, 1 - HEADER / 2 / height,
             'one run of %d leasehold run processes, scraped every %g ms; red dashed lines: %s'
             % (len(per_instance), SCRAPE_INTERVAL * 1000,
                ', '.join(EVENT_LABELS[action] for _, action, _ in events)),
             color=DIM, fontsize=10, va='center', ha='right')

    for panel in dashboard['panels']:
        pos = panel['gridPos']
        x, y = pos['x'] / 24 * WIDTH + GAP, HEADER + pos['y'] * ROW + GAP
        w, h = pos['w'] / 24 * WIDTH - 2 * GAP, pos['h'] * ROW - 2 * GAP
        if panel['type'] == 'row':
            fig.text(x / WIDTH, 1 - (y + h / 2) / height, panel['title'], color=TEXT,
                     fontsize=12, weight='bold', va='center')
            continue
        lines = []
        for target in panel['targets']:
            by, series = evaluate(target['expr'], per_instance, times)
            for group in sorted(series):
                lines.append((legend(target['legendFormat'], by, group), series[group]))
        # As many legend columns as the longest name lets fit (8.5 pt: about 0.065 in a letter).
        longest = max((len(name) for name, _ in lines), default=1)
        columns = max(1, min(len(lines), int((w - 0.3) / (0.065 * longest + 0.4))))
        legend_height = LEGEND_LINE * math.ceil(len(lines) / columns)

        frame = fig.add_axes(rect(x, y, w, h), facecolor=PANEL, xticks=[], yticks=[])
        for spine in frame.spines.values():
            spine.set_color(GRID)
        frame.text(0.1 / w, 1 - 0.08 / h, panel['title'], transform=frame.transAxes,
                   color=TEXT, fontsize=10, weight='bold', va='top')
        ax = fig.add_axes(rect(x + Y_LABELS, y + TITLE, w - Y_LABELS - 0.15,
                               h - TITLE - X_LABELS - legend_height - 0.05), facecolor=PANEL)
        for i, (name, ys) in enumerate(lines):
            # Points too, on a series of a few seconds (as Grafana's showPoints: auto would).
            few = sum(not math.isnan(v) for v in ys) <= 10
            ax.plot(xs, ys, color=PALETTE[i % len(PALETTE)], linewidth=1.4, label=name,
                    marker='o' if few else None, markersize=3)
        unit = panel.get('fieldConfig', {}).get('defaults', {}).get('unit')
        values = [v for _, ys in lines for v in ys if not math.isnan(v)]
        whole = all(v == int(v) for v in values)
        style(ax, unit_formatter(unit), xs[-1], integer=whole and unit == 'short')
        # Headroom above the highest value for the event labels.
        ax.set_ylim(0, 1.25 * max(values) if values and max(values) > 0 else 1)
        for at, action, what in events:
            ax.axvline(at, color=EVENT_COLOR, linewidth=1, linestyle='--', alpha=0.9)
            if action == 'pause redis':
                ax.axvspan(at, at + what / 1000, color=EVENT_COLOR, alpha=0.18, linewidth=0)
            ax.text(at + 0.3, 0.98, EVENT_LABELS[action], transform=ax.get_xaxis_transform(),
                    color=EVENT_COLOR, fontsize=7.5, va='top')
        if lines:
            ax.legend(loc='upper left', ncol=columns, frameon=False, fontsize=8.5,
                      labelcolor=TEXT, handlelength=1.2, columnspacing=1.5, borderaxespad=0,
                      bbox_to_anchor=(-(Y_LABELS - 0.1) / (w - Y_LABELS - 0.15),
                                      -X_LABELS / (h - TITLE - X_LABELS - legend_height - 0.05)))
        else:
            ax.text(0.5, 0.5, 'No data', transform=ax.transAxes, color=DIM, ha='center')
    fig.savefig(out, dpi=80, facecolor=BACKGROUND)
    plt.close(fig)


def style(ax, formatter, end, integer):
    ax.set_xlim(0, end)
    ax.yaxis.set_major_formatter(formatter)
    ax.yaxis.set_major_locator(MaxNLocator(4, integer=integer))
    ax.xaxis.set_major_locator(MultipleLocator(5))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: '%ds' % v))
    ax.tick_params(colors=DIM, labelsize=8, length=0)
    ax.grid(color=GRID, linewidth=0.6)
    for spine in ax.spines.values():
        spine.set_visible(False)


# ---------------------------------------------------------------- the figures

def log_time(logs, name, message):
    """When process `name` first logged `message` (its stderr also holds the command's lines,
    which are not JSON)."""
    for line in logs.get(name, []):
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if record.get('fields', {}).get('message') == message:
                return datetime.fromisoformat(record['timestamp'].replace('Z', '+00:00'))
    return None


def report(recording):
    t0, logs = recording['t0'], recording['logs']
    ok = True
    print('exit statuses:')
    for name, code in recording['exits'].items():
        expected = HOLDERS[name][-1]
        ok &= code == expected
        print('  %-18s %4s%s' % (name, code, '' if code == expected else
                                 '   UNEXPECTED (expected %d)' % expected))
    print('events (s from start): ' + ', '.join('%s %s at %.2f' % (e['action'], e['what'],
                                                                   e['t'] - t0)
                                                for e in recording['events']))
    released = log_time(logs, 'build-a', 'lease actor finished')
    acquired = log_time(logs, 'build-a (waiter)', 'lease acquired')
    sigterm = next(e['t'] for e in recording['events'] if e['action'] == 'sigterm')
    if released and acquired:
        print('handoff: SIGTERM to the holder -> its release %.0f ms (the command winds down '
              'for 1 s), release -> waiter acquired %.1f ms, SIGTERM -> waiter acquired %.0f ms'
              % ((released.timestamp() - sigterm) * 1000,
                 (acquired - released).total_seconds() * 1000,
                 (acquired.timestamp() - sigterm) * 1000))
    per_instance = by_instance(recording['scrapes'])
    for name in ('leasehold_wait_seconds', 'leasehold_wait_wakeups_total'):
        seen = {}
        for s in per_instance.get('build-a (waiter)', []):
            for labels, value in selected(s, name, {}) if s['series'] else []:
                if labels.get('quantile', '1') == '1':
                    seen[tuple(sorted(labels.items()))] = value
        for key, value in seen.items():
            print('waiter: %s%s %g' % (name, dict(key), value))
    pause = next(e['t'] for e in recording['events'] if e['action'] == 'pause redis')
    before = margins(recording['scrapes'], pause - 10, pause)
    after = margins(recording['scrapes'], pause, pause + 10)
    print('renew margin, lowest per purpose (quantile 0): 10 s before the pause %s; '
          'in the 10 s from the pause %s' % (before, after))
    indeterminate = {}
    for s in recording['scrapes']:
        for labels, value in selected(s, 'leasehold_renew_total', {'outcome': 'indeterminate'}) \
                if s['series'] else []:
            indeterminate[s['instance']] = value
    print('indeterminate renewals by process (last scraped): %s' % indeterminate)
    return ok


def margins(scrapes, start, end):
    lowest = {}
    for s in scrapes:
        if start <= s['t'] < end and s['series']:
            for labels, value in selected(s, 'leasehold_renew_margin_seconds', {'quantile': '0'}):
                purpose = labels['purpose']
                lowest[purpose] = round(min(value, lowest.get(purpose, value)), 3)
    return lowest


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--leasehold', default='target/debug/leasehold',
                        help='the CLI binary (default: target/debug/leasehold)')
    parser.add_argument('--out', default=str(REPO / 'docs' / 'grafana' / 'leasehold.png'))
    parser.add_argument('--record', help='also write the scrapes and events to this JSON file')
    parser.add_argument('--replay', help='draw from this recording instead of running')
    args = parser.parse_args()
    if args.replay:
        recording = json.loads(Path(args.replay).read_text())
    else:
        leasehold = str(Path(args.leasehold).resolve())
        if not Path(leasehold).is_file():
            raise SystemExit('no leasehold binary at %s (cargo build -p leasehold-cli)' % leasehold)
        recording = run_scenario(leasehold)
        if args.record:
            Path(args.record).write_text(json.dumps(recording))
    ok = report(recording)
    draw(recording, args.out)
    print('wrote %s (%d KB)' % (args.out, Path(args.out).stat().st_size // 1024))
    if not ok:
        raise SystemExit('the run did not go as planned: see the exit statuses above')


if __name__ == '__main__':
    main()
