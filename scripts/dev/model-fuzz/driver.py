"""Runs `inferd serve -m CASE` for each case and records the outcome as JSON lines."""
import json, os, resource, signal, subprocess, sys, time, urllib.request

WORK = os.environ.get('FUZZ_WORK', '/tmp/inferd-model-fuzz')
BIN = os.environ.get('FUZZ_BIN', 'target/release/inferd')
PORT = 18950
LIMIT_AS = 8_000_000 * 1024
EXTRA = os.environ.get('EXTRA', '').split()


def limits():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_AS, LIMIT_AS))
    os.setsid()


def vmhwm(pid):
    try:
        for line in open(f'/proc/{pid}/status'):
            if line.startswith('VmHWM'):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def get(path, body=None, timeout=60):
    req = urllib.request.Request(f'http://127.0.0.1:{PORT}{path}', data=body,
                                 headers={'Content-Type': 'application/json'} if body else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(errors='replace')
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors='replace')
    except Exception as e:
        return None, repr(e)


def run_case(name, path, wall=90):
    errf = open(f'{WORK}/logs/{name}.err', 'wb')
    t0 = time.time()
    p = subprocess.Popen(['timeout', str(wall), BIN, 'serve', '-m', path, '--port', str(PORT)] + EXTRA,
                         stdout=errf, stderr=subprocess.STDOUT, preexec_fn=limits)
    peak = 0
    served = False
    req = None
    while True:
        rc = p.poll()
        # timeout's child: find it
        try:
            kids = open(f'/proc/{p.pid}/task/{p.pid}/children').read().split()
        except OSError:
            kids = []
        for k in kids:
            h = vmhwm(int(k))
            if h:
                peak = max(peak, h)
        if rc is not None:
            break
        st, body = get('/health', timeout=2)
        if st == 200:
            served = True
            st2, body2 = get('/v1/chat/completions', json.dumps(
                {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).encode(), timeout=60)
            st4, body4 = get('/v1/completions', json.dumps(
                {"prompt": "hi there", "max_tokens": 4}).encode(), timeout=60)
            req = (st2, body2[:200], st4, body4[:200])
            st3, _ = get('/health', timeout=5)
            req = req + (st3,)
            for k in kids:
                h = vmhwm(int(k))
                if h:
                    peak = max(peak, h)
            for k in kids:
                try:
                    os.kill(int(k), signal.SIGTERM)
                except OSError:
                    pass
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            break
        time.sleep(0.3)
    rc = p.returncode
    dt = time.time() - t0
    errf.close()
    err = open(f'{WORK}/logs/{name}.err', 'rb').read().decode(errors='replace')
    tail = err.strip().splitlines()[-6:]
    flags = []
    if 'panicked at' in err:
        flags.append('PANIC')
    if 'memory allocation of' in err:
        flags.append('ALLOC_ABORT')
    if rc in (124, 137) and not served:
        flags.append('HANG')
    if rc is not None and rc < 0 or rc in (134, 139, 132, 135):
        flags.append('SIGNAL')
    if served:
        flags.append('SERVED')
        if req and (req[0] is None or req[2] is None or req[4] != 200 or req[0] >= 500 or req[2] >= 500):
            flags.append('REQ_CRASH')
    if not served and rc == 0:
        flags.append('EXIT0')
    res = dict(name=name, rc=rc, secs=round(dt, 1), peak_rss_mb=round(peak / 1024), flags=flags,
               req=req, tail=tail)
    return res


if __name__ == '__main__':
    os.makedirs(WORK + '/logs', exist_ok=True)
    cases = json.load(open(sys.argv[1]))
    out = open(sys.argv[2], 'a')
    for name, path in cases:
        r = run_case(name, path)
        out.write(json.dumps(r) + '\n')
        out.flush()
        print(name, r['rc'], r['secs'], r['peak_rss_mb'], r['flags'], '|', (r['tail'] or [''])[-1][:200], flush=True)
