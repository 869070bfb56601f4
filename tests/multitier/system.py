#!/usr/bin/env python3
"""system.py: a real multi-tier web system in private network namespaces, for Causeway.

client -> load balancer (DNAT on a router) -> two nginx -> threaded Python app -> redis and
postgres, each on its own "host" (network namespace); optionally traced by Causeway's LD_PRELOAD
library and/or captured by tcpdump on every end host; ground truth logged by the programs
themselves (as in tests/jobqueue.rs).  The driver is Python 3 stdlib.  Needs root, iproute2,
iptables (statistic, DNAT), nginx, redis-server, PostgreSQL (/usr/lib/postgresql/*/bin),
runuser, tcpdump (--pcap-dir), python3-psycopg2 (for the app).

USAGE
  sudo tests/multitier/system.py [--prefix P] [--net 10.78] [--workdir DIR] [--truth FILE]
        [--requests 1300] [--clients 4] [--seed 1] [--duration 60] [--timeout 5] [--keys 100]
        [--preload LIB --capture-dir DIR] [--pcap-dir DIR] [--names FILE] [--loss HOST:P]
        [--flap HOST:DOWN:EVERY] [-v]
  sudo tests/multitier/system.py --cleanup P     remove what a (killed) run with prefix P left
  e.g. (about 5 s for the default 1300 requests)
    tests/multitier/system.py --preload target/fast/libcauseway_preload.so --capture-dir \
        /tmp/mt/cap --pcap-dir /tmp/mt/pcap --truth /tmp/mt/truth.jsonl --workdir /tmp/mt/work
    causeway analyze /tmp/mt/cap --emit patterns,stats,nat --format jsonl -o cap.jsonl
    causeway analyze /tmp/mt/pcap/*.pcap --emit patterns,stats,nat --format jsonl -o pcap.jsonl

TOPOLOGY (prefix P, default mt<pid>, <= 11 chars; net N, default 10.78; veth P<c>h in the host
  <-> P<c>r in P-lb, c the code below; IPv6 off; nothing is created in the root namespace)
  P-client c   N.1.2/24, default via N.1.1
  P-lb         router: N.1.1/24 + virtual IP N.1.100/32 on Pcr; bridge br0 N.2.1/24 with each
               backend's P<c>r; ip_forward=1; nat PREROUTING tcp to N.1.100:80 -> DNAT
               N.2.11:8080 (statistic nth every 2 packet 0), else N.2.12:8080: client
               connections alternate between the nginx, conntrack keeps each on its one
  P-web1  w1   N.2.11  nginx :8080, 1 worker, `user root`, proxy_pass to upstream app
               N.2.20:8000 keepalive 16, HTTP/1.1, Connection "", X-Via: web1
  P-web2  w2   N.2.12  the same, X-Via: web2
  P-app   ap   N.2.20  python3 ThreadingHTTPServer :8000, HTTP/1.1, Content-Length, ~300 B
               answers in one write; /cache: a redis GET, /db: a postgres SELECT, /both: GET
               then SELECT, /static: nothing (key/row = id mod --keys); per thread a
               persistent redis socket (minimal RESP) and psycopg2 connection (autocommit)
  P-redis rd   N.2.30  redis-server :6379, no persistence, untraced
  P-pg    pg   N.2.40  postgres 15 :5432, fsync off, trust for N.0.0/16, untraced
  The backends' default route is via N.2.1.
LOSS  --loss HOST:P (repeatable): from just before the load, iptables in HOST's namespace drops
  each TCP packet in and out of its link with probability P (statistic --mode random).
  --flap HOST:DOWN:EVERY (repeatable): during the load, every EVERY ms HOST's link drops all
  TCP for DOWN ms (an iptables DROP inserted and deleted): losses on all its connections at once.
LOAD  --clients threads in P-client share --requests requests, each on a NEW connection to
  http://N.1.100/<kind> (kind drawn with --seed), header X-Req: <id>, bounded by --timeout,
  then a 0-5 ms pause; none starts after --duration s.  Which nginx serves which id depends on
  the threads' timing.
TRACING  --preload LIB --capture-dir DIR: client, both nginx (master, worker) and app run with
  LD_PRELOAD=LIB CAUSEWAY_CAPTURE_DIR=DIR (one dir; every log <hostname>.<pid>.<n>.cwlog has
  this machine's host name and clock).  --pcap-dir DIR: `tcpdump -i P<c>h -s 256 -U
  --immediate-mode --time-stamp-precision nano -w DIR/<host>.pcap` in each end host (client
  web1 web2 app redis pg; not P-lb, a router), so each packet once per end host, from after
  the servers listen until after they stopped.
ORDER  namespaces; postgres (initdb), redis; init (untraced: table items, keys item:<k>); app;
  nginx x2; wait until each listens (ss: no probe connections in the traces); tcpdumps;
  client; nginx (SIGQUIT: graceful), app (SIGTERM -> sys.exit: exit handlers run, the preload
  library flushes), redis (SIGTERM), postgres (SIGINT: fast), tcpdump (SIGINT).
TRUTH  workdir/client.jsonl: {"id","kind","t0","t1","port","status"[,"error"]} per request (t0
  before connect, t1 after the answer; time.time_ns(); port: the client's local port); workdir/app.jsonl: {"id","kind","via",
  "t_read","t_recv","t_send","calls":[{"to":"redis"|"pg","t0","t1"}]} per request served (t_read:
  its request line read; t_recv: its handler started; t_send: its answer handed to the kernel).  --truth FILE,
  per request joined by id: {"id","kind","via","status","error","port","client_t0","client_t1",
  "t_read","t_recv","t_send","calls","app_records","ok"}; ok = 200 and one app record of the same kind.
  stdout: multitier: sent 1300 answered 1300 ok 1300 in 3.7 s (setup 1.8 s, load 1.3 s, stop
  0.6 s); web1/both=166 web1/cache=... web2/static=...   --names FILE: `ADDRESS NAME` lines.
CLEANUP  atexit + SIGINT/SIGTERM/SIGHUP: children stopped (then killed), every process in the
  namespaces killed, namespaces deleted, the database's directory removed, and the workdir if
  it was temporary.  `--cleanup P` does it after a SIGKILL (namespaces named exactly P-<host>,
  temporary dirs /tmp/multitier-P-*); the app and client die with the driver (PDEATHSIG).
EXIT STATUS  0 every request ok; 1 some not; 2 usage/setup error; 128+N killed by signal N.
"""

import argparse
import atexit
import ctypes
import glob
import io
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter

SELF = os.path.abspath(__file__)
# The newest PostgreSQL Debian installed (its server binaries are not on PATH).
PGBIN = (sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                key=lambda p: int(p.split("/")[-2]) if p.split("/")[-2].isdigit() else 0)
         or ["/usr/lib/postgresql/15/bin"])[-1]
# host, veth code, address after the net's two octets
HOSTS = [("client", "c", "1.2"), ("web1", "w1", "2.11"), ("web2", "w2", "2.12"),
         ("app", "ap", "2.20"), ("redis", "rd", "2.30"), ("pg", "pg", "2.40")]
KINDS = ["cache", "db", "both", "static"]


def jline(fh, obj, lock):
    with lock:
        fh.write(json.dumps(obj, separators=(",", ":")) + "\n")
        fh.flush()


# ----------------------------------------------------------------------------- roles

def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def read_reply(f):
    line = f.readline()
    if not line.endswith(b"\r\n"):
        raise EOFError("redis closed the connection")
    kind, rest = line[:1], line[1:-2]
    if kind in (b"+", b":"):
        return rest
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2]
    raise RuntimeError("unexpected reply %r" % line)


def retry(fn, limit, what):
    deadline = time.time() + limit
    while True:
        try:
            return fn()
        except Exception as e:
            if time.time() > deadline:
                raise RuntimeError(f"{what}: {e}")
            time.sleep(0.2)


def pg_connect(net):
    import psycopg2
    db = psycopg2.connect(host=f"{net}.2.40", user="postgres", dbname="postgres",
                          connect_timeout=3)
    db.autocommit = True
    return db


def role_init(a):
    """Untraced: fill redis and postgres with what the app reads; waits for both (bounded)."""
    s = retry(lambda: socket.create_connection((f"{a.net}.2.30", 6379), timeout=2), 20, "redis")
    f = s.makefile("rb")
    for k in range(a.keys):
        s.sendall(resp("SET", f"item:{k}", f"cached value of item {k} " + "r" * 100))
        read_reply(f)
    s.close()
    db = retry(lambda: pg_connect(a.net), 30, "postgres")
    c = db.cursor()
    c.execute("DROP TABLE IF EXISTS items")
    c.execute("CREATE TABLE items (id int PRIMARY KEY, name text, payload text)")
    c.executemany("INSERT INTO items VALUES (%s, %s, %s)",
                  [(k, f"item {k}", "p" * 100) for k in range(a.keys)])
    db.close()
    print(f"init: {a.keys} redis keys, {a.keys} rows")


def role_app(a):
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    local, lock, out = threading.local(), threading.Lock(), open(a.out, "a")

    def redis_connect():
        if getattr(local, "redis", None) is None:
            s = socket.create_connection((f"{a.net}.2.30", 6379), timeout=5)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            local.redis = (s, s.makefile("rb"))

    def redis_get(key):
        redis_connect()
        s, f = local.redis
        s.sendall(resp("GET", key))
        return read_reply(f)

    def pg_select(k):
        if getattr(local, "pg", None) is None:
            local.pg = pg_connect(a.net)
        c = local.pg.cursor()
        c.execute("SELECT name, payload FROM items WHERE id = %s", (k,))
        return c.fetchone()

    def drop():  # close this thread's backend connections
        r, db = getattr(local, "redis", None), getattr(local, "pg", None)
        local.redis = local.pg = None
        for c in (r and r[0], db):
            try:
                c and c.close()
            except Exception:
                pass

    class TimedReads(io.RawIOBase):
        """The connection's reads, each timed as it returns: what the handler's log takes as
        the time a request came in (the read that brought its first bytes), as near the
        read as python gets; after the read the thread may wait for the interpreter's lock,
        which the log then counts as the application's time, as the socket calls do."""

        def __init__(self, sock):
            self.sock, self.last_ns = sock, None

        def readable(self):
            return True

        def readinto(self, b):
            n = self.sock.recv_into(b)
            self.last_ns = time.time_ns()
            return n

    class TimedWrites(io.RawIOBase):
        """The connection's writes, each timed as it is handed to the kernel: what the
        handler's log takes as the time its answer went out (as the socket calls time a
        send), not when the interpreter began to build it."""

        def __init__(self, sock):
            self.sock, self.last_ns = sock, None

        def writable(self):
            return True

        def write(self, b):
            self.last_ns = time.time_ns()
            self.sock.sendall(b)
            return len(b)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self):
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.reads = TimedReads(self.connection)
            self.rfile = io.BufferedReader(self.reads)
            self.writes = self.wfile = TimedWrites(self.connection)
            # This thread's backend connections, opened before its first request: a
            # request's true path is then its kind's, with no connection set-up inside.
            try:
                redis_connect()
                if getattr(local, "pg", None) is None:
                    local.pg = pg_connect(a.net)
            except Exception:
                drop()  # opened again when a request needs them

        def parse_request(self):
            # Called as soon as the request line is read: the request came in with the
            # read that returned it (TimedReads), not when the interpreter got here.
            self.t_read = self.reads.last_ns or time.time_ns()
            return super().parse_request()

        def finish(self):  # the connection (and its thread) ends
            drop()
            super().finish()

        def do_GET(self):
            t_recv = time.time_ns()
            rid = self.headers.get("X-Req", "")
            rid = int(rid) if rid.isdigit() else rid
            kind, via = self.path.strip("/").split("?")[0], self.headers.get("X-Via")
            calls, data, status, err = [], {}, 200, None
            k = (rid if isinstance(rid, int) else 0) % a.keys
            try:
                if kind in ("cache", "both"):
                    t0 = time.time_ns()
                    v = redis_get(f"item:{k}")
                    calls.append({"to": "redis", "t0": t0, "t1": time.time_ns()})
                    data["redis"] = (v or b"").decode()[:40]
                if kind in ("db", "both"):
                    t0 = time.time_ns()
                    row = pg_select(k)
                    calls.append({"to": "pg", "t0": t0, "t1": time.time_ns()})
                    data["pg"] = row[0] if row else None
                if kind not in KINDS:
                    status, err = 404, "unknown kind"
            except Exception as e:
                drop()
                status, err = 500, f"{type(e).__name__}: {e}"
            body = json.dumps({"id": rid, "kind": kind, "via": via, "data": data,
                               "error": err}).encode()
            body += b" " * max(0, 300 - len(body)) + b"\n"
            head = (f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
            self.wfile.write(head.encode() + body)  # one write: no Nagle wait for a second
            rec = {"id": rid, "kind": kind, "via": via, "t_read": self.t_read, "t_recv": t_recv,
                   "t_send": self.writes.last_ns, "calls": calls}
            if err:
                rec["error"] = err
            jline(out, rec, lock)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer((f"{a.net}.2.20", 8000), Handler)
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()


def role_client(a):
    import http.client
    rng = random.Random(a.seed)
    todo = [(i, rng.choice(KINDS)) for i in range(1, a.requests + 1)]
    lock, out, nxt = threading.Lock(), open(a.out, "w"), [0]
    deadline = time.monotonic() + a.duration

    def worker(k):
        pause = random.Random(a.seed * 1000 + k)
        for _ in range(a.requests):
            with lock:
                if nxt[0] >= len(todo) or time.monotonic() >= deadline:
                    return
                rid, kind = todo[nxt[0]]
                nxt[0] += 1
            rec = {"id": rid, "kind": kind, "t0": time.time_ns()}
            c = http.client.HTTPConnection(f"{a.net}.1.100", 80, timeout=a.timeout)
            try:
                c.request("GET", "/" + kind, headers={"X-Req": str(rid)})
                # The connection's own port: which capture records are this request's.
                rec["port"] = c.sock.getsockname()[1]
                r = c.getresponse()
                r.read()
                rec["status"] = r.status
            except Exception as e:
                rec["status"], rec["error"] = None, f"{type(e).__name__}: {e}"
            finally:
                c.close()
            rec["t1"] = time.time_ns()
            jline(out, rec, lock)
            time.sleep(pause.uniform(0, 0.005))

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    ts = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(a.clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(max(0.0, deadline - time.monotonic()) + a.timeout + 1)


# ----------------------------------------------------------------------------- driver

def run_cmd(cmd, check=True, timeout=60):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def nsx(ns, *cmd):
    return ["ip", "netns", "exec", ns, *cmd]


def our_namespaces(prefix):
    want = {f"{prefix}-{h}" for h, _, _ in HOSTS + [("lb", 0, 0)]}
    r = run_cmd(["ip", "netns", "list"], check=False)
    return [ln.split()[0] for ln in r.stdout.splitlines() if ln.split() and ln.split()[0] in want]


def remove_namespaces(names):
    for _ in range(3):  # postgres may fork a backend while we kill
        for ns in names:
            for p in run_cmd(["ip", "netns", "pids", ns], check=False).stdout.split():
                try:
                    os.kill(int(p), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        time.sleep(0.1)
    for ns in names:
        run_cmd(["ip", "netns", "del", ns], check=False)


def nginx_conf(d, name, net):
    temps = "".join(f"    {t}_temp_path {d}/tmp/{t};\n"
                    for t in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    return f"""worker_processes 1;
user root;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    log_format mt '$msec $remote_addr "$request" $status x_req=$http_x_req '
                  'rt=$request_time urt=$upstream_response_time uct=$upstream_connect_time';
    access_log {d}/access.log mt;
{temps}    upstream app {{ server {net}.2.20:8000; keepalive 16; }}
    server {{
        listen 0.0.0.0:8080;
        location / {{
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-Via {name};
        }}
    }}
}}
"""


def find_python():
    """A python3 with psycopg2: this one, or Debian's (.ci/run installs python3-psycopg2)."""
    for py in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(py) and subprocess.run(
                [py, "-c", "import psycopg2"], stderr=subprocess.DEVNULL).returncode == 0:
            return py
    raise RuntimeError("no python3 with psycopg2 (apt-get install python3-psycopg2)")


class Run:
    def __init__(self, a):
        self.a, self.P, self.net = a, a.prefix, a.net
        self.procs, self.created, self.cleaned, self.times = {}, [], False, {}
        self.tmp_workdir = not a.workdir
        self.pg_dir = None
        self.work = a.workdir or tempfile.mkdtemp(prefix=f"multitier-{self.P}-")
        self.t_start = time.time()

    def log(self, msg):
        if self.a.verbose:
            print(f"multitier: [{time.time() - self.t_start:6.2f} s] {msg}", file=sys.stderr)

    def ns(self, host):
        return f"{self.P}-{host}"

    def spawn(self, name, host, argv, traced=False, sig=signal.SIGTERM, group=True):
        """Start argv in host's namespace; stop() sends sig to it (or its process group)."""
        env = {k: v for k, v in os.environ.items()
               if k not in ("LD_PRELOAD", "CAUSEWAY_CAPTURE_DIR")}
        if traced and self.a.preload:  # `env` execs argv: only argv itself is traced
            argv = ["env", f"LD_PRELOAD={self.a.preload}",
                    f"CAUSEWAY_CAPTURE_DIR={self.a.capture_dir}", *argv]
        with open(f"{self.work}/{name}.out", "w") as o, open(f"{self.work}/{name}.err", "w") as e:
            p = subprocess.Popen(nsx(self.ns(host), *argv), env=env, stdin=subprocess.DEVNULL,
                                 stdout=o, stderr=e, start_new_session=True)
        self.procs[name] = (p, sig, group)
        return p

    def role_argv(self, role, *extra):
        return [self.py, SELF, "--role", role, "--net", self.net, "--keys", str(self.a.keys),
                *extra]

    def stop(self, name, wait=10.0):
        p, sig, group = self.procs.get(name, (None, 0, 0))
        if p is None or p.poll() is not None:
            return
        try:
            (os.killpg if group else os.kill)(p.pid, sig)
            p.wait(wait)
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            print(f"multitier: {name} did not stop in {wait} s, killing it", file=sys.stderr)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(5)

    def stop_all(self, wait):
        for name in ("client", "web1", "web2", "app", "redis", "pg"):
            self.stop(name, wait)
        time.sleep(0.2)  # the last FINs and ACKs reach the captures
        for name in list(self.procs):
            self.stop(name, wait)

    def wait_for(self, name, ok, what, limit=20.0):
        deadline = time.time() + limit
        while time.time() < deadline and self.procs[name][0].poll() is None:
            if ok():
                return
            time.sleep(0.05)
        with open(f"{self.work}/{name}.err", errors="replace") as fh:
            raise RuntimeError(f"{name}: {what} ({fh.read()[-800:].strip()})")

    def wait_listen(self, name, port):
        ss = nsx(self.ns(name), "ss", "-Hltn", f"sport = :{port}")
        self.wait_for(name, lambda: "LISTEN" in run_cmd(ss, check=False).stdout,
                      f"does not listen on :{port}")

    # -- setup
    def setup_net(self):
        P, net, lb = self.P, self.net, self.ns("lb")
        for ns in [self.ns(h) for h, _, _ in HOSTS] + [lb]:
            run_cmd(["ip", "netns", "add", ns])
            self.created.append(ns)
            run_cmd(["ip", "-n", ns, "link", "set", "lo", "up"])
            run_cmd(nsx(ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1",
                        "net.ipv6.conf.default.disable_ipv6=1"))
        run_cmd(nsx(lb, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"))
        run_cmd(["ip", "-n", lb, "link", "add", "br0", "type", "bridge"])
        run_cmd(["ip", "-n", lb, "addr", "add", f"{net}.2.1/24", "dev", "br0"])
        run_cmd(["ip", "-n", lb, "link", "set", "br0", "up"])
        for host, code, addr in HOSTS:
            hi, ri, ns = f"{P}{code}h", f"{P}{code}r", self.ns(host)
            run_cmd(["ip", "link", "add", hi, "netns", ns, "type", "veth", "peer", "name", ri,
                     "netns", lb])
            run_cmd(["ip", "-n", ns, "addr", "add", f"{net}.{addr}/24", "dev", hi])
            run_cmd(["ip", "-n", ns, "link", "set", hi, "up"])
            gw = f"{net}.1.1" if host == "client" else f"{net}.2.1"
            run_cmd(["ip", "-n", ns, "route", "add", "default", "via", gw])
            if host == "client":
                run_cmd(["ip", "-n", lb, "addr", "add", f"{net}.1.1/24", "dev", ri])
                run_cmd(["ip", "-n", lb, "addr", "add", f"{net}.1.100/32", "dev", ri])
            else:
                run_cmd(["ip", "-n", lb, "link", "set", ri, "master", "br0"])
            run_cmd(["ip", "-n", lb, "link", "set", ri, "up"])
        vip = ["iptables", "-t", "nat", "-A", "PREROUTING", "-d", f"{net}.1.100/32", "-p", "tcp",
               "--dport", "80"]
        run_cmd(nsx(lb, *vip, "-m", "statistic", "--mode", "nth", "--every", "2", "--packet",
                    "0", "-j", "DNAT", "--to-destination", f"{net}.2.11:8080"))
        run_cmd(nsx(lb, *vip, "-j", "DNAT", "--to-destination", f"{net}.2.12:8080"))

    def start_servers(self):
        # The database in a directory of its own under the system's temporary directory
        # (world-traversable), not under the workdir, whose parents the postgres user may
        # not be allowed into (a mktemp -d, a home directory).
        w, net, pgd = self.work, self.net, tempfile.mkdtemp(prefix=f"multitier-pg-{self.P}-")
        self.pg_dir = pgd
        os.chmod(pgd, 0o755)
        os.makedirs(f"{pgd}/sock")
        for d in (pgd, f"{pgd}/sock"):
            shutil.chown(d, "postgres", "postgres")
        run_cmd(["runuser", "-u", "postgres", "--", f"{PGBIN}/initdb", "-D", f"{pgd}/data",
                 "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync"])
        with open(f"{pgd}/data/pg_hba.conf", "a") as fh:
            fh.write(f"host all all {net}.0.0/16 trust\n")
        self.spawn("pg", "pg", ["runuser", "-u", "postgres", "--", f"{PGBIN}/postgres", "-D",
                                f"{pgd}/data", "-c", f"listen_addresses={net}.2.40", "-c",
                                f"unix_socket_directories={pgd}/sock", "-c", "fsync=off", "-c",
                                "synchronous_commit=off", "-c", "full_page_writes=off"],
                   sig=signal.SIGINT)
        os.makedirs(f"{w}/redis", exist_ok=True)
        self.spawn("redis", "redis", ["redis-server", "--bind", f"{net}.2.30", "--port", "6379",
                                      "--save", "", "--appendonly", "no", "--protected-mode",
                                      "no", "--dir", f"{w}/redis"])
        self.wait_listen("pg", 5432)
        self.wait_listen("redis", 6379)
        init = subprocess.run(nsx(self.ns("app"), *self.role_argv("init")), timeout=60,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if init.returncode != 0:
            raise RuntimeError(f"init failed: {init.stdout.strip()[-800:]}")
        self.log(init.stdout.strip())
        for f in ("app.jsonl", "client.jsonl"):
            if os.path.exists(f"{w}/{f}"):
                os.unlink(f"{w}/{f}")
        self.spawn("app", "app", self.role_argv("app", "--out", f"{w}/app.jsonl"), traced=True,
                   group=False)
        for web in ("web1", "web2"):
            d = f"{w}/{web}"
            for t in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
                os.makedirs(f"{d}/tmp/{t}", exist_ok=True)
            with open(f"{d}/nginx.conf", "w") as fh:
                fh.write(nginx_conf(d, web, net))
            self.spawn(web, web, ["nginx", "-p", d, "-c", f"{d}/nginx.conf", "-e",
                                  f"{d}/error.log"], traced=True, sig=signal.SIGQUIT, group=False)
        self.wait_listen("app", 8000)
        self.wait_listen("web1", 8080)
        self.wait_listen("web2", 8080)

    def start_captures(self):
        for host, code, _ in HOSTS:
            self.spawn(f"tcpdump-{host}", host, [
                "tcpdump", "-i", f"{self.P}{code}h", "-n", "-s", "256", "-U", "--immediate-mode",
                "--time-stamp-precision", "nano", "-Z", "root", "-w",
                f"{self.a.pcap_dir}/{host}.pcap"], sig=signal.SIGINT)
        for host, _, _ in HOSTS:
            err = f"{self.work}/tcpdump-{host}.err"
            self.wait_for(f"tcpdump-{host}", lambda: "listening on" in open(err).read(),
                          "did not start", 10)

    # -- run
    def run(self):
        a = self.a
        for d in (self.work, a.capture_dir, a.pcap_dir):
            if d:
                os.makedirs(d, exist_ok=True)
        if a.capture_dir and glob.glob(f"{a.capture_dir}/*.cwlog"):
            print(f"multitier: warning: {a.capture_dir} already holds logs", file=sys.stderr)
        self.py = find_python()
        self.setup_net()
        self.log("namespaces up")
        self.start_servers()
        self.log("servers up")
        if a.pcap_dir:
            self.start_captures()
            self.log("captures up")
        if a.names:
            with open(a.names, "w") as fh:
                fh.write(f"{self.net}.1.100 vip\n{self.net}.1.1 lb\n{self.net}.2.1 lb\n")
                fh.writelines(f"{self.net}.{addr} {h}\n" for h, _, addr in HOSTS)
        t0 = time.time()
        self.times["setup"] = t0 - self.t_start
        for spec in a.loss or []:
            host, p = spec
            # Random loss on the host's own link, both ways, for the load only (iptables
            # statistic: this kernel has no netem).
            for chain, flag in (("INPUT", "-i"), ("OUTPUT", "-o")):
                run_cmd(nsx(self.ns(host), "iptables", "-A", chain, flag,
                            f"{self.P}{dict((h, c) for h, c, _ in HOSTS)[host]}h", "-p", "tcp",
                            "-m", "statistic", "--mode", "random", "--probability", str(p),
                            "-j", "DROP"))
            self.log(f"loss {p} on {host}'s link")
        stop_flaps = threading.Event()
        flaps = [threading.Thread(target=self.flap, args=(spec, stop_flaps), daemon=True)
                 for spec in a.flap or []]
        for t in flaps:
            t.start()
        client = self.spawn("client", "client", self.role_argv(
            "client", "--out", f"{self.work}/client.jsonl", "--clients", str(a.clients),
            "--requests", str(a.requests), "--seed", str(a.seed), "--duration",
            str(a.duration), "--timeout", str(a.timeout)), traced=True, group=False)
        try:
            client.wait(a.duration + a.timeout + 10)
        except subprocess.TimeoutExpired:
            print("multitier: the client overran its time, stopping it", file=sys.stderr)
        self.stop("client")
        stop_flaps.set()
        for t in flaps:
            t.join()
        t1 = time.time()
        self.times["load"] = t1 - t0
        self.log("load done")
        self.stop_all(15)
        self.times["stop"] = time.time() - t1
        self.log("stopped")
        return self.merge()

    def flap(self, spec, stop):
        """Takes HOST's link down (every TCP packet in and out dropped) for DOWN ms every
        EVERY ms until `stop` is set: the losses of all its connections at the same moments."""
        host, down, every = spec
        dev = f"{self.P}{dict((h, c) for h, c, _ in HOSTS)[host]}h"
        rules = [("INPUT", "-i"), ("OUTPUT", "-o")]
        n = 0
        while not stop.wait((every - down) / 1000.0):
            for chain, flag in rules:
                run_cmd(nsx(self.ns(host), "iptables", "-I", chain, flag, dev, "-p", "tcp",
                            "-j", "DROP"))
            time.sleep(down / 1000.0)
            for chain, flag in rules:
                run_cmd(nsx(self.ns(host), "iptables", "-D", chain, flag, dev, "-p", "tcp",
                            "-j", "DROP"))
            n += 1
        self.log(f"{host}'s link went down {n} times")

    def merge(self):
        def load(path):
            if not os.path.exists(path):
                return []
            with open(path) as fh:
                return [json.loads(ln) for ln in fh if ln.strip()]
        by_id = {}
        for r in load(f"{self.work}/app.jsonl"):
            by_id.setdefault(r["id"], []).append(r)
        rows, per = [], Counter()
        for c in sorted(load(f"{self.work}/client.jsonl"), key=lambda r: r["id"]):
            recs = by_id.get(c["id"], [])
            s = recs[-1] if recs else {}
            ok = (c.get("status") == 200 and len(recs) == 1 and s.get("kind") == c["kind"]
                  and "error" not in s)
            rows.append({"id": c["id"], "kind": c["kind"], "via": s.get("via"),
                         "status": c.get("status"), "error": c.get("error") or s.get("error"),
                         "port": c.get("port"),
                         "client_t0": c["t0"], "client_t1": c["t1"], "t_read": s.get("t_read"),
                         "t_recv": s.get("t_recv"),
                         "t_send": s.get("t_send"), "calls": s.get("calls"),
                         "app_records": len(recs), "ok": ok})
            per[f"{s.get('via')}/{c['kind']}"] += ok
        if self.a.truth:
            tmp = f"{self.a.truth}.tmp{os.getpid()}"
            with open(tmp, "w") as fh:
                fh.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in rows)
            os.replace(tmp, self.a.truth)
        answered = sum(r["status"] is not None for r in rows)
        nok = sum(r["ok"] for r in rows)
        drops = []
        for host, _, _ in HOSTS if self.a.pcap_dir else []:
            with open(f"{self.work}/tcpdump-{host}.err", errors="replace") as fh:
                drops += [f"{host}: {ln.strip()}" for ln in fh
                          if "dropped by kernel" in ln and not ln.startswith("0 ")]
        print(f"multitier: sent {len(rows)} answered {answered} ok {nok} "
              f"in {time.time() - self.t_start:.1f} s (setup {self.times['setup']:.1f} s, "
              f"load {self.times['load']:.1f} s, stop {self.times['stop']:.1f} s); "
              + " ".join(f"{k}={v}" for k, v in sorted(per.items()) if v)
              + (f"; tcpdump drops: {drops}" if drops else ""), flush=True)
        return 0 if nok == len(rows) == self.a.requests else 1

    def cleanup(self):
        if self.cleaned:
            return
        self.cleaned = True
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        self.stop_all(3)
        remove_namespaces(self.created)
        if self.pg_dir:
            shutil.rmtree(self.pg_dir, ignore_errors=True)
        if self.tmp_workdir:
            shutil.rmtree(self.work, ignore_errors=True)
        self.log("cleaned up")


def cleanup_prefix(prefix):
    nss = our_namespaces(prefix)
    remove_namespaces(nss)
    dirs = (glob.glob(os.path.join(tempfile.gettempdir(), f"multitier-{prefix}-*"))
            + glob.glob(os.path.join(tempfile.gettempdir(), f"multitier-pg-{prefix}-*")))
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
    print(f"multitier: removed namespaces {nss or '[]'} and {len(dirs)} temporary dirs")


def loss_spec(s):
    host, _, p = s.partition(":")
    if host not in [h for h, _, _ in HOSTS] or not p:
        raise argparse.ArgumentTypeError(f"{s!r}: expected HOST:P, HOST one of "
                                         f"{', '.join(h for h, _, _ in HOSTS)}")
    try:
        p = float(p)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r}: P is not a number") from None
    if not 0.0 < p < 1.0:
        raise argparse.ArgumentTypeError(f"{s!r}: P must be between 0 and 1")
    return host, p


def flap_spec(s):
    parts = s.split(":")
    if len(parts) != 3 or parts[0] not in [h for h, _, _ in HOSTS]:
        raise argparse.ArgumentTypeError(f"{s!r}: expected HOST:DOWN:EVERY (ms), HOST one of "
                                         f"{', '.join(h for h, _, _ in HOSTS)}")
    try:
        down, every = int(parts[1]), int(parts[2])
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r}: DOWN and EVERY are milliseconds") from None
    if not 0 < down < every:
        raise argparse.ArgumentTypeError(f"{s!r}: need 0 < DOWN < EVERY")
    return parts[0], down, every


def parse_args(argv):
    ap = argparse.ArgumentParser(description="A multi-tier web system in network namespaces "
                                 "(see the file's docstring).",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--prefix", default=f"mt{os.getpid()}",
                    help="name prefix of namespaces and interfaces (<= 11 chars)")
    ap.add_argument("--cleanup", metavar="PREFIX", help="remove what a run with PREFIX left")
    ap.add_argument("--net", default="10.78", help="first two octets of the addresses")
    ap.add_argument("--workdir", help="scratch dir: configs, logs, raw truth (default: a "
                    "temporary dir, removed at the end)")
    ap.add_argument("--truth", help="write the joined per-request truth (JSON lines) here")
    ap.add_argument("--requests", type=int, default=1300, help="requests in total")
    ap.add_argument("--clients", type=int, default=4, help="client threads")
    ap.add_argument("--seed", type=int, default=1, help="seed of the kinds and pauses")
    ap.add_argument("--duration", type=float, default=60.0, help="no request starts later")
    ap.add_argument("--timeout", type=float, default=5.0, help="seconds per request")
    ap.add_argument("--keys", type=int, default=100, help="redis keys / table rows")
    ap.add_argument("--preload", help="LD_PRELOAD library for client, nginx and app")
    ap.add_argument("--capture-dir", help="CAUSEWAY_CAPTURE_DIR of the traced programs")
    ap.add_argument("--pcap-dir", help="tcpdump in each end host into DIR/<host>.pcap")
    ap.add_argument("--loss", action="append", type=loss_spec, metavar="HOST:P",
                    help="drop each TCP packet on HOST's link (both ways) with probability P "
                    "during the load (iptables statistic); repeatable")
    ap.add_argument("--flap", action="append", type=flap_spec, metavar="HOST:DOWN:EVERY",
                    help="take HOST's link down (TCP dropped both ways) for DOWN ms every "
                    "EVERY ms during the load; repeatable")
    ap.add_argument("--names", help="write `ADDRESS NAME` lines for causeway --names here")
    ap.add_argument("-v", "--verbose", action="store_true", help="print phase times")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.role or a.cleanup:
        return a
    if len(a.prefix) > 11 or not a.prefix.isalnum():
        ap.error("--prefix must be alphanumeric and at most 11 characters")
    parts = a.net.split(".")
    if len(parts) != 2 or not all(p.isdigit() and int(p) < 256 for p in parts):
        ap.error("--net must be two octets, e.g. 10.78")
    if bool(a.preload) != bool(a.capture_dir):
        ap.error("--preload and --capture-dir go together")
    if not (0 < a.requests <= 100000 and 0 < a.clients <= 64 and 0 < a.duration <= 3600
            and 0 < a.timeout <= 60 and 0 < a.keys <= 100000):
        ap.error("--requests, --clients, --duration, --timeout or --keys out of range")
    for k in ("preload", "capture_dir", "pcap_dir", "truth", "names", "workdir"):
        if getattr(a, k):
            setattr(a, k, os.path.abspath(getattr(a, k)))
    if a.preload and not os.path.isfile(a.preload):
        ap.error(f"--preload {a.preload}: no such file")
    return a


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    if a.role:
        try:
            ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: die with the driver
        except Exception:
            pass
        {"init": role_init, "app": role_app, "client": role_client}[a.role](a)
        return 0
    if os.geteuid() != 0:
        print("multitier: needs root (network namespaces)", file=sys.stderr)
        return 2
    if a.cleanup:
        cleanup_prefix(a.cleanup)
        return 0
    if our_namespaces(a.prefix):
        print(f"multitier: namespaces with prefix {a.prefix} exist; use --cleanup {a.prefix}",
              file=sys.stderr)
        return 2
    run = Run(a)
    atexit.register(run.cleanup)

    def on_signal(signum, frame):
        raise SystemExit(128 + signum)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        return run.run()
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
        print(f"multitier: {e}", file=sys.stderr)
        return 2
    finally:
        run.cleanup()


if __name__ == "__main__":
    sys.exit(main())
