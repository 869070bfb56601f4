#!/usr/bin/env python3
"""faults.py: a reproducible TCP fault-injection scenario driver for Causeway's TCP diagnosis.

Builds a private set of network namespaces, runs one traffic pattern per SNAP performance
class (SNAP paper, /work/shared/papers/snap-tcp-profiling.md, section 2.2 Table 2 and 2.3)
for a bounded time, optionally captures it (pcap, `ss -tinm` log, a live monitor command),
writes ground-truth labels and a topology file, and removes everything it created.
Python 3 standard library only; needs root, iproute2 (ip, tc, ss), iptables (nft or legacy
backend) with the `statistic` match and the NFQUEUE target, and the ifb/tbf/ingress/u32/mirred
traffic-control pieces.  It does NOT need sch_netem (this kernel has none): loss is done with
iptables `statistic` drops and delay with a small NFQUEUE delay line (see IMPAIRMENTS).

USAGE
  sudo tests/tcp/faults.py [--prefix P] [--duration S] [--scenarios a,b,...]
        [--labels FILE] [--topology FILE] [--pcap FILE] [--ss FILE] [--tcpinfo FILE]
        [--monitor 'SHELL COMMAND'] [--selfcheck] [--report FILE] [--cc cubic]
  sudo tests/tcp/faults.py --cleanup P        remove what a (killed) run with prefix P left
  tests/tcp/check_ss.py SSLOG [--tcpinfo F] [--labels F]   summarise an ss log per connection

  Typical end-to-end use (about 14.5 s wall time with the default 12 s of traffic):
    tests/tcp/faults.py --labels /tmp/l.json --topology /tmp/topo.txt --pcap /tmp/a.pcap \
        --ss /tmp/ss.log --monitor 'exec my-live-poller --out /tmp/live.jsonl' --selfcheck

TOPOLOGY (prefix P, default cw<pid>; net N, default 10.77; scenario number i = 1..6)
  namespace  P-a              "host A": every *sender* of every scenario lives here, so one
                              TCP-statistics poller or one tcpdump inside A sees every connection
  namespace  P-<scenario>     one peer host per scenario
  veth       P<cc>a (in A)  <->  P<cc>b (in P-<scenario>), cc = ls sl ng sb ic ct
  addresses  A: N.i.1/24, peer: N.i.2/24  (its own /24 per link)
  i: 1 loss, 2 slow, 3 nagle, 4 sndbuf, 5 incast, 6 control
  server port 5000+i; A-side client ports 40000+100*i+k (fixed, so labels are known up front);
  incast: the aggregator (peer, ports 40500+k) connects to the workers listening on A:5005.
  All namespaces: IPv6 off; GSO/TSO off on the veths (gso_max_segs 1) so that captures and
  drops are per MSS-sized segment.  Every scenario socket uses --cc (default cubic), set per
  socket (TCP_CONGESTION): a namespace may only default to an algorithm of the global
  net.ipv4.tcp_allowed_congestion_control (here "reno bbr"), which this script leaves alone.

SCENARIOS (t0 = start of traffic; every loop is bounded by --duration and by a count;
  expected -> possible classes in brackets, as in the labels)
  loss     a link whose loss is switched ON for --loss-on s and OFF for --loss-off s (first ON
           at t0+1 s; default 2/2 s, so ON at t0+[1,3), [5,7), [9,11)), in both directions, so
           problems on its connections are correlated in time.  Each ON phase starts with a
           --loss-blackout (0.6 s) of 100% loss, then --loss-rate (0.1) random loss.
           3 bulk flows (64 KB every 50 ms, app-rate-limited, ~1.3 MB/s each)
             [fast_retransmit -> timeout, sndbuf_limited]
           3 sparse request flows (100 B every 100 ms, TCP_NODELAY; the peer answers 100 B on
             the first two and not on the third; a request is skipped while the previous one
             is unacknowledged, as an RPC client waiting for its answer would)
             [timeout -> fast_retransmit, delayed_ack]
           Why the blackout: Linux rarely times out on random loss.  RACK recovers a lost
           request by SACKs of whatever is sent after it, and with one segment in flight the
           tail loss probe (TLP) fires at about the RTO time and recovers it; only when the
           probe (or its ACK) is lost too does the RTO fire.  A 0.6 s blackout loses request,
           probe and the first retransmission of every active flow: >= 1 RTO per flow per ON
           phase, deterministically.
  slow     peer readers with SO_RCVBUF 4096 reading 2 KB every 20 ms and all pausing together
           for 1 s every 3 s (first pause at t0+1.5 s); 3 senders in A write as fast as they
           can (64 KB send()s)  [rwnd_limited -> sndbuf_limited, delayed_ack (the small
           window makes the receiver's ACKs wait for its delayed-ACK timer or its next read)]
  nagle    SNAP 6.2's logging application: 3 connections, A writes 20-100 byte records every
           5 ms, Nagle on (no TCP_NODELAY), blocking writes; the peer never replies and
           drains its socket every 1 s (Linux acks a pushed small segment at once when the
           reader empties the receive queue, so a reader blocked in recv() would hide the
           problem); each segment waits for the delayed-ACK timer (40 ms minimum at HZ=250)
           [delayed_ack]: srtt ~ 25-30 ms vs minrtt ~ 0.002 ms; the peer's TcpExt
           DelayedACKs counts the timer's ACKs.
  sndbuf   2 senders with SO_SNDBUF --sndbuf (8192; the kernel doubles it) writing as fast as
           they can (blocking 64 KB sendall()s) over a link with --delay-ms (20) ms of delay
           A->peer and a 50 mbit tbf on A's egress  [sndbuf_limited]: ~0.5 MB/s each,
           sndbuf_limited ~ 95% of busy time.  The tbf is not the bottleneck (the flows use
           ~4 mbit each) but it is needed for the kernel's counter: tcpi_sndbuf_limited only
           starts when a transmission empties the write queue while the writer is blocked
           (tcp_cwnd_validate); with a bare veth every full segment leaves at once from
           tcp_sendmsg (tcp_push_one), so nothing is left to send when the writer blocks and
           the counter stays 0 however full the buffer.  With a qdisc that holds a packet for
           a moment, TCP small queues defer the last segments to the TSQ handler, which
           empties the queue while the writer sleeps, as on a real NIC.
  incast   an aggregator in the peer opens 8 (--incast-workers) connections to the workers in
           A; in bursts of queries (2 s on, 2 s off, from t0), every 250 ms (or when all
           answers are in, if later) it sends an 8-byte request
           on all of them at once (in a new random order each round, seeded) and every
           worker answers 64 KB at once; the peer's
           ingress from the link is shaped by tbf rate 50mbit burst 3000 limit 10000
           (~6 packets of queue) -> answers collide, lose whole windows, time out
           [timeout -> fast_retransmit]; a round takes ~285 ms where the link alone needs
           ~85 ms (512 KB at 50 mbit).  Several rounds per second, rather than the two of
           128 KB answers, make each worker's losses per second less a matter of chance, so
           that the workers' problems rise and fall together more reliably (the packets'
           ACC over the link was 0.39-0.58 with 128 KB every 500 ms, 0.55-0.66 now).
  control  2 healthy transfers, 8 full segments (11584 B) every 20 ms, TCP_NODELAY, on a
           clean link, peer SO_RCVBUF 4 MB  [app_limited]: whole, even numbers of full
           segments, and a receive window that does not depend on the reader, make the
           receiver ack every second segment at once in softirq; otherwise an ACK that waits
           for the reader thread to be scheduled on a busy machine lets the tail loss probe
           (2 srtt + 8 ms) fire spuriously and the control shows a retransmission.
  Tuning: --set SCEN.KEY=VALUE overrides any key of a scenario's "impairment" or internal
  parameters (e.g. --set incast.limit=24000 --set sndbuf.delay_ms=40).

IMPAIRMENTS (all on the link, none inside A's sending stack: a drop in the sender's own
  egress qdisc or OUTPUT chain is a local transmit failure that TCP simply retries, not loss)
  loss     iptables -t raw chain CWLOSS, jumped to from PREROUTING -i <link> in both the peer
           namespace (A->peer) and A (peer->A); blackout = `-j DROP`, random =
           `-m statistic --mode random --probability R -j DROP`, OFF = flush.  The actual
           switch times are in the labels ("on", "blackouts").
  delay    iptables -t mangle PREROUTING -i <link> -p tcp -j NFQUEUE --queue-bypass in the
           sndbuf peer; a delay-line worker (this file, --worker delay:sndbuf) holds each
           packet for --delay-ms and then accepts it (FIFO, batch verdicts).  Stands in for
           netem delay; its jitter is ~0.1-1 ms.
  incast   ifb device in the incast peer; ingress qdisc + u32 + mirred redirect of the link's
           incoming packets to the ifb; tbf rate/burst/limit on the ifb.

CAPTURES (all inside A, started before the connections open, stopped after they close)
  --peer-pcaps DIR the same in every peer host, DIR/<scenario>.pcap: both ends captured
  --pcap FILE      tcpdump -i any -w FILE -s 128 -U (libpcap "any": LINUX_SLL2 link type);
                   stopped with SIGINT so the file is complete
  --ss FILE        while sleep 0.25; do echo "### $(date +%s.%N)"; ss -tinm; done > FILE
                   (a trap makes SIGTERM end it between blocks, so the last block is whole)
  --tcpinfo FILE   JSON lines, one per connection per 0.25 s poll, read over NETLINK_SOCK_DIAG
                   by this script: tcp_info fields ss 6.1 does not print (total_rto,
                   total_rto_recoveries, total_rto_time_ms, snd_wnd, ...) plus skmem
  --monitor CMD    `sh -c CMD` inside A for the whole run, environment CW_PREFIX, CW_NS_A,
                   CW_LABELS, CW_TOPOLOGY, CW_T0, CW_DURATION; stopped with SIGINT (to its
                   process group) at the end, waited for up to 10 s, then killed
  Connections are held open --linger (0.5 s) after the traffic ends so that the last
  ss/tcpinfo blocks still have them.

OUTPUT FILES
  --topology FILE  text, one line per link, then one line per application:
                       link NAME CIDR_A CIDR_B    (a connection between an address in CIDR_A
                                                   and one in CIDR_B crosses link NAME)
                       app NAME PORT              (scenario NAME's server port)
                   e.g.
                       link loss 10.77.1.1/32 10.77.1.2/32
                       link slow 10.77.2.1/32 10.77.2.2/32
                       ...
                       app loss 5001
                       app incast 5005
  --labels FILE    JSON, written before the traffic starts and rewritten at the end with the
                   actual impairment switch times and incast rounds:
    {"version": 1, "prefix": "cw123", "host_a": {"namespace": "cw123-a", "addresses": [...]},
     "t0": <unix s>, "end": <unix s>, "duration": 12.0, "cc": "cubic",
     "classes": ["fast_retransmit","timeout","rwnd_limited","delayed_ack","sndbuf_limited",
                 "app_limited"],
     "scenarios": [
       {"name": "loss", "link": "loss", "subnet": "10.77.1.0/24", "a_ip": "10.77.1.1",
        "peer_ip": "10.77.1.2", "peer_namespace": "cw123-loss", "a_ifname": "cw123lsa",
        "peer_ifname": "cw123lsb", "server_port": 5001, "server_side": "peer",
        "impairment": {"kind": "loss", "rate": 0.1, "direction": "both", "on_s": 2.0,
                       "off_s": 2.0, "first_on_s": 1.0, "blackout_s": 0.6,
                       "on": [[t_on, t_off], ...], "blackouts": [[t_on, t_random], ...],
                       "planned_on": [[...], ...]},
        "connections": [
          {"local": "10.77.1.1:40101", "peer": "10.77.1.2:5001", "role": "bulk",
           "expected": ["fast_retransmit"], "possible": ["timeout", ...]}, ...]}, ...]}
    `local` is A's end, `peer` the peer's; `expected`: SNAP classes the connection must show;
    `possible`: classes it may show as a side effect (not a false positive).  Other
    scenarios' "impairment": slow {"kind": "slow_reader", ..., "pauses": [[t0, t1], ...]},
    nagle {"kind": "delayed_ack", ...}, sndbuf {"kind": "delay", "delay_ms": 20, ...},
    incast {"kind": "tbf", "rate": "50mbit", ...}, control {"kind": "none"}.  The incast
    scenario also has "rounds": [[t_request, t_last_answer, unanswered], ...] and
    "server_side": "a" (its connections' `local` is A:5005).  All times are unix seconds
    (CLOCK_REALTIME, the clock of `ss` blocks and pcap timestamps).

SELF-CHECK  (--selfcheck; --report FILE writes the evidence as JSON)
  Runs the ss logger and the tcpinfo poller (to temporary files unless --ss/--tcpinfo given),
  snapshots /proc/net/netstat and /proc/net/snmp of every namespace before and after the
  traffic, and judges each labelled connection with check_ss.py's CLASS RULES (deltas of the
  kernel's counters between the first and last sample of the connection: timeouts from
  tcpi_total_rto of the netlink poller, retransmissions net of D-SACKed ones, rwnd/sndbuf
  limited time, rtt - minrtt), plus the nagle peer's TcpExt DelayedACKs > 0.  Exit status 1
  if any connection misses an expected class or shows a class outside expected+possible.
  Known noise: a stall of this (shared, 2-core) machine of ~10-50 ms makes a tail loss probe
  fire spuriously on a clean connection now and then (D-SACKed, hence discounted).

CLEANUP  atexit + SIGINT/SIGTERM/SIGHUP handlers: children (own process groups) are
  terminated, then killed; namespaces P-a and P-<scenario> are deleted (their veths, ifb,
  qdiscs and iptables rules go with them); the temporary run directory is removed.  Nothing
  is created in the root namespace.  `--cleanup P` does the same for a run that was killed
  with SIGKILL (it only touches namespaces named exactly P-a / P-<scenario>).

EXIT STATUS  0 ok; 1 self-check failed; 2 usage/setup error; 128+N killed by signal N.
"""

import argparse
import atexit
import ctypes
import errno
import glob
import json
import os
import random
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque

SELF = os.path.abspath(__file__)
HERE = os.path.dirname(SELF)

# name, number (third octet, port 5000+n, client ports 40000+100n+k), ifname code
SCENARIOS = [
    ("loss", 1, "ls"),
    ("slow", 2, "sl"),
    ("nagle", 3, "ng"),
    ("sndbuf", 4, "sb"),
    ("incast", 5, "ic"),
    ("control", 6, "ct"),
]
CLASSES = ["fast_retransmit", "timeout", "rwnd_limited", "delayed_ack", "sndbuf_limited",
           "app_limited"]


# ----------------------------------------------------------------------------- plan

def make_plan(a):
    P = a.prefix
    net = a.net
    scen = []
    for name, n, code in SCENARIOS:
        if name not in a.scenarios:
            continue
        a_ip, p_ip = f"{net}.{n}.1", f"{net}.{n}.2"
        port = 5000 + n
        sc = {
            "name": name, "link": name, "subnet": f"{net}.{n}.0/24", "a_ip": a_ip,
            "peer_ip": p_ip, "peer_namespace": f"{P}-{name}", "a_ifname": f"{P}{code}a",
            "peer_ifname": f"{P}{code}b", "server_port": port, "server_side": "peer",
            "connections": [],
        }

        def conn(k, role, expected, possible, **kw):
            c = {"local": f"{a_ip}:{40000 + 100 * n + k}", "peer": f"{p_ip}:{port}",
                 "role": role, "expected": expected, "possible": possible}
            c.update(kw)
            sc["connections"].append(c)

        if name == "loss":
            sc["impairment"] = {"kind": "loss", "rate": a.loss_rate, "direction": "both",
                                "on_s": a.loss_on, "off_s": a.loss_off, "first_on_s": 1.0,
                                "blackout_s": a.loss_blackout, "on": [], "blackouts": [],
                                "planned_on": []}
            sc["params"] = {"bulk_chunk": 65536, "bulk_interval": 0.05, "req_size": 100,
                            "req_interval": 0.1, "answer_size": 100}
            for k in (1, 2, 3):
                conn(k, "bulk", ["fast_retransmit"], ["timeout", "sndbuf_limited"])
            for k, ans in ((11, True), (12, True), (13, False)):
                conn(k, "sparse", ["timeout"], ["fast_retransmit", "delayed_ack"], answered=ans)
        elif name == "slow":
            sc["impairment"] = {"kind": "slow_reader", "rcvbuf": 4096, "read_size": 2048,
                                "read_interval": 0.02, "pause_period_s": 3.0,
                                "pause_s": 1.0, "first_pause_s": 1.5, "pauses": []}
            sc["params"] = {"chunk": 65536}
            for k in (1, 2, 3):
                conn(k, "bulk", ["rwnd_limited"], ["sndbuf_limited", "delayed_ack"])
        elif name == "nagle":
            sc["impairment"] = {"kind": "delayed_ack", "peer_read_interval": 1.0,
                                "nodelay": False}
            sc["params"] = {"rec_min": 20, "rec_max": 100, "interval": 0.005}
            for k in (1, 2, 3):
                conn(k, "logger", ["delayed_ack"], [])
        elif name == "sndbuf":
            sc["impairment"] = {"kind": "delay", "delay_ms": a.delay_ms, "direction": "a_to_peer",
                                "sndbuf": a.sndbuf, "a_egress_rate": "50mbit",
                                "a_egress_burst": 1600, "a_egress_limit": 200000}
            # peer_rcvbuf: as for the control, ACKs must not wait for the reader thread
            sc["params"] = {"chunk": 65536, "blocking": True, "nodelay": False,
                            "peer_rcvbuf": 4 << 20}
            for k in (1, 2):
                conn(k, "bulk", ["sndbuf_limited"], [])
        elif name == "incast":
            sc["server_side"] = "a"
            sc["impairment"] = {"kind": "tbf", "where": "peer ingress (ifb)",
                                "rate": "50mbit", "burst": 3000, "limit": 10000}
            sc["params"] = {"size": 65536, "period": 0.25, "burst_on": 2.0, "burst_off": 2.0}
            sc["rounds"] = []
            for k in range(1, a.incast_workers + 1):
                sc["connections"].append({
                    "local": f"{a_ip}:{port}", "peer": f"{p_ip}:{40000 + 100 * n + k}",
                    "role": "worker", "expected": ["timeout"], "possible": ["fast_retransmit"]})
        elif name == "control":
            sc["impairment"] = {"kind": "none"}
            # a large receive buffer keeps the advertised window independent of the reader,
            # so the receiver acks every second segment at once (see a_control)
            sc["params"] = {"segments": 8, "interval": 0.02, "peer_rcvbuf": 4 << 20}
            for k in (1, 2):
                conn(k, "bulk", ["app_limited"], [])
        for kv in a.set or []:
            k, v = kv.split("=", 1)
            sn, key = k.split(".", 1)
            if sn != name:
                continue
            try:
                v = json.loads(v)
            except ValueError:
                pass  # a plain string such as 50mbit
            for d in (sc.get("params", {}), sc["impairment"]):
                if key in d:
                    d[key] = v
                    break
            else:
                raise SystemExit(f"faults: --set {kv}: {name} has no parameter {key}")
        scen.append(sc)
    return {
        "version": 1, "prefix": P, "cc": a.cc, "duration": a.duration, "linger": a.linger,
        "host_a": {"namespace": f"{P}-a", "addresses": [s["a_ip"] for s in scen]},
        "classes": CLASSES, "scenarios": scen, "t0": None, "end": None,
    }


def ip_port(s):
    h, p = s.rsplit(":", 1)
    return h, int(p)


# ----------------------------------------------------------------------------- workers

def set_pdeathsig():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def sleep_until(t):
    d = t - time.time()
    if d > 0:
        time.sleep(d)


CC = None  # the workers' congestion control (--cc), set per socket


def mk_sock(sndbuf=None, rcvbuf=None, nodelay=False):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if CC:
        # per socket: a namespace's default may only be a "non-restricted" algorithm, and
        # net.ipv4.tcp_allowed_congestion_control is global; CAP_NET_ADMIN may set any
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, CC.encode())
    if sndbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    if nodelay:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


class Worker:
    """One side of one scenario, running inside its namespace."""

    def __init__(self, plan, name):
        self.plan = plan
        self.sc = next(s for s in plan["scenarios"] if s["name"] == name)
        self.t0 = plan["t0"]
        self.end = plan["end"]
        self.hard_end = self.end + plan["linger"] + 1.5
        self.duration = plan["duration"]
        self.socks = []
        self.stats = {}
        self.errors = []
        self.lock = threading.Lock()
        self.extra = {}

    # -- helpers
    def st(self, key):
        with self.lock:
            return self.stats.setdefault(key, {"ops": 0, "bytes": 0})

    def thread(self, fn, *args):
        def run():
            try:
                fn(*args)
            except Exception as e:  # reported in the summary, never fatal
                with self.lock:
                    self.errors.append(f"{fn.__name__}: {type(e).__name__}: {e}")
        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t

    def connect(self, local, peer, **opts):
        lh, lp = ip_port(local)
        ph, pp = ip_port(peer)
        deadline = self.t0 + 1.0
        while True:
            s = mk_sock(**opts)
            s.bind((lh, lp))
            try:
                s.connect((ph, pp))
                self.socks.append(s)
                return s
            except OSError:
                s.close()
                if time.time() > deadline:
                    raise
                time.sleep(0.05)

    def listen(self, host, port, rcvbuf=None):
        s = mk_sock(rcvbuf=rcvbuf)
        s.bind((host, port))
        s.listen(64)
        s.settimeout(0.2)
        self.socks.append(s)
        return s

    def accept_loop(self, ls, handler, nmax):
        for _ in range(nmax):
            while True:
                if time.time() >= self.end:
                    return
                try:
                    c, addr = ls.accept()
                    break
                except socket.timeout:
                    continue
            self.socks.append(c)
            self.thread(handler, c, f"{addr[0]}:{addr[1]}")

    def send_until(self, s, data, key):
        """send() all of data unless the end of the traffic comes first."""
        view = memoryview(data)
        sent = 0
        while sent < len(data) and time.time() < self.end:
            try:
                n = s.send(view[sent:])
            except (socket.timeout, BlockingIOError, InterruptedError):
                continue
            sent += n
        st = self.st(key)
        st["ops"] += 1
        st["bytes"] += sent
        return sent

    def periodic(self, interval, fn):
        """Call fn() every interval from t0 to end (no catch-up bursts); bounded count."""
        t = self.t0
        for _ in range(int(self.duration / interval) + 2):
            if t >= self.end:
                break
            sleep_until(t)
            if time.time() >= self.end:
                break
            fn()
            t += interval
            if t < time.time():
                t = time.time()

    def blast(self, s, chunk, key):
        s.settimeout(0.1)
        buf = b"B" * chunk
        sleep_until(self.t0)
        # bounded: a chunk per iteration can never take less than ~1 us
        for _ in range(int(self.duration * 1e6)):
            if time.time() >= self.end:
                break
            self.send_until(s, buf, key)

    def sink(self, c, key, hold=None):
        c.settimeout(0.2)
        n = 0
        while time.time() < self.hard_end:
            if hold and hold():
                time.sleep(0.02)
                continue
            try:
                d = c.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                break
            if not d:
                break
            n += len(d)
        st = self.st(key)
        st["bytes"] += n

    def finish(self):
        sleep_until(self.end + self.plan["linger"])
        for s in self.socks:
            try:
                s.close()
            except OSError:
                pass
        out = {"scenario": self.sc["name"], "stats": self.stats, "errors": self.errors}
        out.update(self.extra)
        print(json.dumps(out), flush=True)

    # -- scenarios, A side (senders) and peer side
    def a_loss(self):
        p = self.sc["params"]
        for c in self.sc["connections"]:
            if c["role"] == "bulk":
                s = self.connect(c["local"], c["peer"])
                self.thread(self._loss_bulk, s, c["local"], p)
            else:
                s = self.connect(c["local"], c["peer"], nodelay=True)
                self.thread(self._loss_sparse, s, c["local"], p)

    def _loss_bulk(self, s, key, p):
        s.settimeout(0.1)
        buf = b"L" * p["bulk_chunk"]
        self.periodic(p["bulk_interval"], lambda: self.send_until(s, buf, key))

    def _loss_sparse(self, s, key, p):
        """A request every req_interval, skipped while the previous one is unacknowledged
        (an RPC client waiting for its answer): no new data follows a lost request, so the
        loss is found by the tail loss probe and, if that is lost too, by the RTO, not by
        SACKs of later data."""
        s.settimeout(0.1)
        req = b"R" * p["req_size"]
        st = self.st(key)
        st["skipped"] = 0
        st["answer_bytes"] = 0

        def one():
            try:
                while True:
                    d = s.recv(65536, socket.MSG_DONTWAIT)
                    if not d:
                        break
                    st["answer_bytes"] += len(d)
            except (BlockingIOError, socket.timeout):
                pass
            ti = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
            if struct.unpack_from("=I", ti, 24)[0]:  # tcpi_unacked
                st["skipped"] += 1
                return
            self.send_until(s, req, key)
        self.periodic(p["req_interval"], one)

    def peer_loss(self):
        p = self.sc["params"]
        roles = {c["local"]: c for c in self.sc["connections"]}
        ls = self.listen(self.sc["peer_ip"], self.sc["server_port"])

        def handle(c, addr):
            lab = roles.get(addr)
            if lab is None or lab["role"] == "bulk":
                return self.sink(c, addr)
            c.settimeout(0.2)
            pend = 0
            ans = b"A" * p["answer_size"]
            st = self.st(addr)
            while time.time() < self.hard_end:
                try:
                    d = c.recv(65536)
                except socket.timeout:
                    continue
                except OSError:
                    break
                if not d:
                    break
                pend += len(d)
                while pend >= p["req_size"]:
                    pend -= p["req_size"]
                    st["ops"] += 1
                    if lab.get("answered") and time.time() < self.end:
                        try:
                            c.sendall(ans)
                        except OSError:
                            return
        self.thread(self.accept_loop, ls, handle, len(roles))

    def a_slow(self):
        for c in self.sc["connections"]:
            s = self.connect(c["local"], c["peer"])
            self.thread(self.blast, s, self.sc["params"]["chunk"], c["local"])

    def _slow_paused(self, t):
        im = self.sc["impairment"]
        x = t - self.t0 - im["first_pause_s"]
        return x >= 0 and t < self.end and (x % im["pause_period_s"]) < im["pause_s"]

    def peer_slow(self):
        im = self.sc["impairment"]
        ls = self.listen(self.sc["peer_ip"], self.sc["server_port"], rcvbuf=im["rcvbuf"])

        def handle(c, addr):
            c.settimeout(0.2)
            st = self.st(addr)
            for _ in range(int((self.hard_end - time.time()) / im["read_interval"]) + 2):
                now = time.time()
                if now >= self.hard_end:
                    break
                if self._slow_paused(now):
                    time.sleep(0.01)
                    continue
                try:
                    d = c.recv(im["read_size"])
                except socket.timeout:
                    continue
                except OSError:
                    break
                if not d:
                    break
                st["ops"] += 1
                st["bytes"] += len(d)
                time.sleep(im["read_interval"])
        self.thread(self.accept_loop, ls, handle, len(self.sc["connections"]))
        # the planned pauses, for the labels
        t = self.t0 + im["first_pause_s"]
        pauses = []
        while t < self.end:
            pauses.append([round(t, 3), round(min(t + im["pause_s"], self.end), 3)])
            t += im["pause_period_s"]
        self.extra["pauses"] = pauses

    def a_nagle(self):
        p = self.sc["params"]
        nodelay = self.sc["impairment"]["nodelay"]  # False: Nagle on (--set nagle.nodelay=true
        for i, c in enumerate(self.sc["connections"]):  # is SNAP's fix)
            s = self.connect(c["local"], c["peer"], nodelay=nodelay)
            self.thread(self._nagle_logger, s, c["local"], p, i)

    def _nagle_logger(self, s, key, p, i):
        rnd = random.Random(1000 + i)
        seq = [0]

        def one():
            n = rnd.randint(p["rec_min"], p["rec_max"])
            rec = (f"{time.time():.6f} conn{i} rec{seq[0]} ".encode() + b"x" * n)[:n - 1] + b"\n"
            s.sendall(rec)  # blocking write
            seq[0] += 1
            st = self.st(key)
            st["ops"] += 1
            st["bytes"] += len(rec)
        self.periodic(p["interval"], one)

    def peer_nagle(self):
        im = self.sc["impairment"]
        ls = self.listen(self.sc["peer_ip"], self.sc["server_port"])

        def handle(c, addr):
            st = self.st(addr)
            for _ in range(int((self.hard_end - time.time()) / im["peer_read_interval"]) + 2):
                if time.time() >= self.hard_end:
                    break
                time.sleep(im["peer_read_interval"])
                try:
                    while True:
                        d = c.recv(65536, socket.MSG_DONTWAIT)
                        if not d:
                            return
                        st["ops"] += 1
                        st["bytes"] += len(d)
                except BlockingIOError:
                    pass
                except OSError:
                    return
        self.thread(self.accept_loop, ls, handle, len(self.sc["connections"]))

    def a_sndbuf(self):
        sb = self.sc["impairment"]["sndbuf"]
        p = self.sc["params"]
        for c in self.sc["connections"]:
            s = self.connect(c["local"], c["peer"], sndbuf=sb, nodelay=p.get("nodelay"))
            if p.get("blocking"):
                self.thread(self._blast_blocking, s, p["chunk"], c["local"])
            else:
                self.thread(self.blast, s, p["chunk"], c["local"])

    def _blast_blocking(self, s, chunk, key):
        s.settimeout(None)
        buf = b"S" * chunk
        sleep_until(self.t0)
        st = self.st(key)
        for _ in range(int(self.duration * 1e6)):
            if time.time() >= self.end:
                break
            s.sendall(buf)
            st["ops"] += 1
            st["bytes"] += chunk

    def peer_sndbuf(self):
        ls = self.listen(self.sc["peer_ip"], self.sc["server_port"],
                         rcvbuf=self.sc.get("params", {}).get("peer_rcvbuf"))
        self.thread(self.accept_loop, ls, self.sink, len(self.sc["connections"]))

    def a_control(self):
        p = self.sc["params"]
        for c in self.sc["connections"]:
            s = self.connect(c["local"], c["peer"], nodelay=True)
            s.settimeout(0.1)
            # whole, even numbers of full segments: the receiver acks every second one at
            # once (in softirq), so no ACK waits for the reader to be scheduled and no tail
            # loss probe (2 srtt + 8 ms) fires spuriously on a busy machine
            mss = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
            buf = b"C" * (mss * p["segments"])
            self.thread(self.periodic, p["interval"],
                        (lambda s=s, k=c["local"], buf=buf: self.send_until(s, buf, k)))

    peer_control = peer_sndbuf

    def a_incast(self):
        p = self.sc["params"]
        ls = self.listen(self.sc["a_ip"], self.sc["server_port"])
        payload = b"W" * p["size"]

        def worker(c, addr):
            c.settimeout(0.1)
            st = self.st(addr)
            buf = b""
            for _ in range(int(self.duration / p["period"]) + 2):
                while len(buf) < 8 and time.time() < self.end:
                    try:
                        d = c.recv(8 - len(buf))
                    except socket.timeout:
                        continue
                    except OSError:
                        return
                    if not d:
                        return
                    buf += d
                if len(buf) < 8:
                    return
                size, _rnd = struct.unpack("!II", buf)
                buf = b""
                self.send_until(c, payload[:size], addr)
        self.thread(self.accept_loop, ls, worker, len(self.sc["connections"]))

    def peer_incast(self):
        p = self.sc["params"]
        conns = []
        for c in self.sc["connections"]:
            s = self.connect(c["peer"], c["local"])  # aggregator side: local is the peer
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conns.append(s)
        self.thread(self._aggregate, conns, p)

    def _aggregate(self, conns, p):
        rounds = []
        self.extra["rounds"] = rounds
        sleep_until(self.t0)
        t = self.t0
        order = list(conns)
        rng = random.Random(5005)
        for rnd in range(int(self.duration / p["period"]) + 2):
            if time.time() >= self.end:
                break
            sleep_until(t)
            cycle = p["burst_on"] + p["burst_off"]
            if p["burst_off"] > 0 and (t - self.t0) % cycle >= p["burst_on"]:
                # between bursts of queries: the aggregator is idle, so the workers'
                # problems come and go together (what correlation looks for)
                t += p["period"]
                continue
            start = time.time()
            req = struct.pack("!II", p["size"], rnd)
            # a new order every round: the workers asked first answer first and get their
            # first window through the queue; with a fixed order they would never time out
            rng.shuffle(order)
            for s in order:
                s.sendall(req)
            left = {s: p["size"] for s in conns}
            for s in conns:
                s.setblocking(False)
            while left and time.time() < self.end + 2.0:
                r, _, _ = select.select(list(left), [], [], 0.1)
                for s in r:
                    try:
                        d = s.recv(min(65536, left[s]))
                    except BlockingIOError:
                        continue
                    if not d:
                        return
                    left[s] -= len(d)
                    if left[s] <= 0:
                        del left[s]
            for s in conns:
                s.setblocking(True)
            done = time.time()
            rounds.append([round(start, 4), round(done, 4), len(left)])
            if left:
                break
            t = max(start + p["period"], done)


# ----------------------------------------------------------------------------- nfqueue delay

NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR, NLMSG_DONE = 2, 3
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_CONFIG, NFQNL_MSG_VERDICT_BATCH = 0, 2, 3


def _nla(t, data):
    ln = 4 + len(data)
    return struct.pack("=HH", ln, t) + data + b"\0" * ((4 - ln % 4) % 4)


def _nlattrs(buf, off, end):
    while off + 4 <= end:
        ln, t = struct.unpack_from("=HH", buf, off)
        if ln < 4:
            break
        yield t & 0x3FFF, buf[off + 4:off + ln]
        off += (ln + 3) & ~3


def delay_line(plan, name):
    """NFQUEUE queue 0: hold every packet delay_ms, then accept (FIFO, batch verdicts)."""
    sc = next(s for s in plan["scenarios"] if s["name"] == name)
    delay = sc["impairment"]["delay_ms"] / 1000.0
    hard_end = plan["end"] + plan["linger"] + 2.0 if plan["end"] else time.time() + 3600
    queue = 0
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)  # NETLINK_NETFILTER
    s.bind((0, 0))
    try:
        s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE
    except OSError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    seq = [0]

    def send(typ, attrs, flags=NLM_F_REQUEST):
        seq[0] += 1
        body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(queue)) + attrs
        s.send(struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | typ,
                           flags, seq[0], 0) + body)

    def acked():
        d = s.recv(65536)
        ln, typ = struct.unpack_from("=IH", d, 0)
        if typ == NLMSG_ERROR:
            err = struct.unpack_from("=i", d, 16)[0]
            if err:
                raise OSError(-err, "nfqueue config: " + os.strerror(-err))

    send(NFQNL_MSG_CONFIG, _nla(1, struct.pack("=BBH", 1, 0, socket.htons(socket.AF_INET))),
         NLM_F_REQUEST | NLM_F_ACK)  # NFQNL_CFG_CMD_BIND
    acked()
    send(NFQNL_MSG_CONFIG,
         _nla(2, struct.pack(">IB", 0, 1))            # params: copy_range 0, COPY_META
         + _nla(3, struct.pack(">I", 16384))          # queue maxlen
         + _nla(4, struct.pack(">I", 1))              # NFQA_CFG_MASK: FAIL_OPEN
         + _nla(5, struct.pack(">I", 1)),             # NFQA_CFG_FLAGS: FAIL_OPEN
         NLM_F_REQUEST | NLM_F_ACK)
    acked()
    try:
        # a delay line that is late adds jitter that TCP sees (a stall of ~30 ms fires the
        # tail loss probe of a 20 ms path spuriously); it is light (~500 packets/s, a few %
        # of a core), so let it preempt the build jobs this machine also runs
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    except (OSError, AttributeError):
        pass
    print("ready", flush=True)
    pending = deque()
    npkts = 0
    nbatches = 0
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *a: stop.__setitem__(0, True))
    signal.signal(signal.SIGINT, lambda *a: stop.__setitem__(0, True))
    last_id = None
    while not stop[0] and time.time() < hard_end:
        now = time.monotonic()
        timeout = max(0.0, pending[0][0] - now) if pending else 0.1
        try:
            r, _, _ = select.select([s], [], [], timeout)
        except InterruptedError:
            continue
        if r:
            while True:
                try:
                    d = s.recv(65536, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    break
                except OSError as e:
                    if e.errno == errno.ENOBUFS:
                        continue
                    raise
                arrive = time.monotonic()
                off = 0
                while off + 16 <= len(d):
                    ln, typ = struct.unpack_from("=IH", d, off)
                    if ln < 16:
                        break
                    if typ == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                        for t, v in _nlattrs(d, off + 20, off + ln):
                            if t == 1:  # NFQA_PACKET_HDR
                                pid = struct.unpack_from(">I", v, 0)[0]
                                pending.append((arrive + delay, pid))
                                npkts += 1
                                break
                    off += (ln + 3) & ~3
        now = time.monotonic()
        rel = None
        while pending and pending[0][0] <= now:
            rel = pending.popleft()[1]
        if rel is not None:
            send(NFQNL_MSG_VERDICT_BATCH, _nla(2, struct.pack(">II", 1, rel)))  # NF_ACCEPT
            nbatches += 1
            last_id = rel
    if pending:
        send(NFQNL_MSG_VERDICT_BATCH, _nla(2, struct.pack(">II", 1, pending[-1][1])))
    print(json.dumps({"scenario": name, "delay_packets": npkts, "verdict_batches": nbatches}),
          flush=True)


# ----------------------------------------------------------------------------- tcp_info poller

# struct tcp_info (include/uapi/linux/tcp.h); fields past the buffer the kernel returns
# are left out.  total_rto* exist since Linux 6.7.
TCPI = [
    ("ca_state", 1, "B"), ("retransmits", 2, "B"), ("probes", 3, "B"), ("backoff", 4, "B"),
    ("rto_us", 8, "I"), ("ato_us", 12, "I"), ("snd_mss", 16, "I"), ("unacked", 24, "I"),
    ("sacked", 28, "I"), ("lost", 32, "I"), ("retrans", 36, "I"), ("rtt_us", 68, "I"),
    ("rttvar_us", 72, "I"), ("snd_cwnd", 80, "I"), ("total_retrans", 100, "I"),
    ("bytes_acked", 120, "Q"), ("segs_out", 136, "I"), ("notsent_bytes", 144, "I"),
    ("min_rtt_us", 148, "I"), ("data_segs_out", 156, "I"), ("busy_us", 168, "Q"),
    ("rwnd_limited_us", 176, "Q"), ("sndbuf_limited_us", 184, "Q"), ("delivered", 192, "I"),
    ("bytes_sent", 200, "Q"), ("bytes_retrans", 208, "Q"), ("dsack_dups", 216, "I"),
    ("reord_seen", 220, "I"), ("snd_wnd", 228, "I"),
    ("rcv_wnd", 232, "I"), ("total_rto", 240, "H"), ("total_rto_recoveries", 242, "H"),
    ("total_rto_time_ms", 244, "I"),
]


def diag_dump(nl, seq):
    """One NETLINK_SOCK_DIAG dump of all non-listening IPv4 TCP sockets."""
    ext = (1 << (2 - 1)) | (1 << (7 - 1))  # INET_DIAG_INFO, INET_DIAG_SKMEMINFO
    states = 0xFFF & ~(1 << 10)  # all but LISTEN
    req = struct.pack("=BBBBI", socket.AF_INET, socket.IPPROTO_TCP, ext, 0, states) + b"\0" * 48
    nl.send(struct.pack("=IHHII", 16 + len(req), 20, 0x301, seq, 0) + req)  # REQUEST|DUMP
    out = []
    while True:
        d = nl.recv(1 << 20)
        off = 0
        while off + 16 <= len(d):
            ln, typ = struct.unpack_from("=IH", d, off)
            if ln < 16:
                return out
            if typ == NLMSG_DONE:
                return out
            if typ == NLMSG_ERROR:
                raise OSError("sock_diag error")
            m = off + 16
            fam, state, timer, retrans = struct.unpack_from("=BBBB", d, m)
            sport, dport = struct.unpack_from(">HH", d, m + 4)
            src = socket.inet_ntoa(d[m + 8:m + 12])
            dst = socket.inet_ntoa(d[m + 24:m + 28])
            expires = struct.unpack_from("=I", d, m + 52)[0]
            r = {"local": f"{src}:{sport}", "peer": f"{dst}:{dport}", "state": state,
                 "timer": timer, "timer_retrans": retrans, "timer_expires_ms": expires}
            for t, v in _nlattrs(d, m + 72, off + ln):
                if t == 2:
                    for name, o, f in TCPI:
                        sz = struct.calcsize(f)
                        if o + sz <= len(v):
                            r[name] = struct.unpack_from("=" + f, v, o)[0]
                elif t == 7 and len(v) >= 36:
                    sk = struct.unpack_from("=9I", v, 0)
                    r["sndbuf"], r["wmem_queued"], r["rcvbuf"] = sk[3], sk[5], sk[1]
            out.append(r)
            off += (ln + 3) & ~3


def tcpinfo_poller(plan, path, interval=0.25):
    nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 4)  # NETLINK_SOCK_DIAG
    nl.bind((0, 0))
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *a: stop.__setitem__(0, True))
    signal.signal(signal.SIGINT, lambda *a: stop.__setitem__(0, True))
    hard_end = time.time() + plan["duration"] + 60
    seq = 0
    with open(path, "w") as fh:
        while not stop[0] and time.time() < hard_end:
            seq += 1
            t = time.time()
            for r in diag_dump(nl, seq):
                r["t"] = round(t, 6)
                fh.write(json.dumps(r, separators=(",", ":")) + "\n")
            fh.flush()
            time.sleep(max(0.0, interval - (time.time() - t)))


def worker_main(role, plan_path, out):
    set_pdeathsig()
    with open(plan_path) as fh:
        plan = json.load(fh)
    if role == "tcpinfo":
        return tcpinfo_poller(plan, out)
    side, name = role.split(":", 1)
    if side == "delay":
        return delay_line(plan, name)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    global CC
    CC = plan["cc"]
    w = Worker(plan, name)
    getattr(w, f"{side}_{name}")()
    w.finish()


# ----------------------------------------------------------------------------- orchestration

def run_cmd(cmd, check=True, quiet=False):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def nsx(ns, *cmd):
    return ["ip", "netns", "exec", ns] + list(cmd)


def read_mibs(namespaces):
    """{namespace: {counter: value}} of TcpExt and Tcp, read in parallel."""
    ps = {ns: subprocess.Popen(nsx(ns, "cat", "/proc/net/netstat", "/proc/net/snmp"),
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
          for ns in namespaces}
    return {ns: parse_mib(p.communicate()[0]) for ns, p in ps.items()}


def parse_mib(text):
    out = {}
    lines = text.splitlines()
    for i in range(0, len(lines) - 1, 2):
        h, v = lines[i].split(), lines[i + 1].split()
        if not h or h[0] != v[0]:
            continue
        grp = h[0].rstrip(":")
        if grp not in ("TcpExt", "Tcp"):
            continue
        for k, x in zip(h[1:], v[1:]):
            try:
                out[k] = int(x)
            except ValueError:
                pass
    return out


MIB_KEYS = ["TCPTimeouts", "TCPFastRetrans", "TCPSlowStartRetrans", "TCPLossProbes",
            "TCPLossProbeRecovery", "TCPSackRecovery", "TCPLostRetransmit", "TCPSpuriousRTOs",
            "DelayedACKs", "DelayedACKLocked", "TCPToZeroWindowAdv", "TCPFromZeroWindowAdv",
            "TCPWantZeroWindowAdv", "TCPRcvQDrop", "RetransSegs", "OutSegs", "InSegs"]


def scenario_names():
    return [s[0] for s in SCENARIOS]


def our_namespaces(prefix):
    want = {f"{prefix}-a"} | {f"{prefix}-{n}" for n in scenario_names()}
    r = run_cmd(["ip", "netns", "list"], check=False)
    have = [ln.split()[0] for ln in r.stdout.splitlines() if ln.strip()]
    return [n for n in have if n in want]


def remove_namespaces(names):
    for ns in names:
        r = run_cmd(["ip", "netns", "pids", ns], check=False)
        for p in r.stdout.split():
            try:
                os.kill(int(p), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    for ns in names:
        run_cmd(["ip", "netns", "del", ns], check=False)


class Run:
    def __init__(self, args, plan):
        self.a = args
        self.plan = plan
        self.P = args.prefix
        self.nsA = plan["host_a"]["namespace"]
        self.procs = {}  # name -> Popen
        self.files = {}
        self.created = []
        self.cleaned = False
        self.rundir = tempfile.mkdtemp(prefix=f"faults-{self.P}-")
        self.summaries = {}
        self.mib_before = {}
        self.mib_after = {}
        self.t_start = time.time()

    def log(self, msg):
        if self.a.verbose:
            print(f"faults: [{time.time() - self.t_start:6.2f} s] {msg}", file=sys.stderr)

    # -- processes
    def spawn(self, name, ns, argv, stdout=None, env=None):
        out = stdout or open(os.path.join(self.rundir, name + ".out"), "w")
        err = open(os.path.join(self.rundir, name + ".err"), "w")
        p = subprocess.Popen(nsx(ns, *argv), stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                             start_new_session=True, env=env)
        self.procs[name] = p
        return p

    def wait_file(self, path, needle, timeout, proc=None):
        t = time.time() + timeout
        while time.time() < t:
            if proc is not None and self.procs[proc].poll() is not None:
                time.sleep(0.05)
                t = 0
            try:
                with open(path, errors="replace") as fh:
                    if needle in fh.read():
                        return True
            except OSError:
                pass
            time.sleep(0.02)
        return False

    def stop(self, name, sig=signal.SIGTERM, wait=3.0, group=True):
        p = self.procs.get(name)
        if p is None or p.poll() is not None:
            return
        try:
            if group:
                os.killpg(p.pid, sig)
            else:
                os.kill(p.pid, sig)
        except ProcessLookupError:
            return
        try:
            p.wait(wait)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(2)

    def stop_all(self, specs):
        """Signal several processes at once, then wait for each up to its own limit."""
        t = time.time()
        sent = []
        for name, sig, wait, group in specs:
            p = self.procs.get(name)
            if p is None or p.poll() is not None:
                continue
            try:
                (os.killpg if group else os.kill)(p.pid, sig)
                sent.append((name, p, t + wait))
            except ProcessLookupError:
                pass
        for name, p, dl in sent:
            try:
                p.wait(max(0.05, dl - time.time()))
            except subprocess.TimeoutExpired:
                print(f"faults: {name} did not stop, killing it", file=sys.stderr)
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(2)

    def worker_argv(self, role, out=None):
        argv = [sys.executable, SELF, "--worker", role, "--plan", self.plan_path]
        if out:
            argv += ["--out", out]
        return argv

    # -- setup
    def setup(self):
        a = self.a
        nss = [self.nsA] + [s["peer_namespace"] for s in self.plan["scenarios"]]
        for ns in nss:
            run_cmd(["ip", "netns", "add", ns])
            self.created.append(ns)
        for ns in nss:
            run_cmd(["ip", "-n", ns, "link", "set", "lo", "up"])
            run_cmd(nsx(ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1",
                        "net.ipv6.conf.default.disable_ipv6=1"))
        for s in self.plan["scenarios"]:
            pns, ai, pi = s["peer_namespace"], s["a_ifname"], s["peer_ifname"]
            run_cmd(["ip", "link", "add", ai, "netns", self.nsA, "type", "veth", "peer", "name",
                     pi, "netns", pns])
            for ns, dev, addr in ((self.nsA, ai, s["a_ip"]), (pns, pi, s["peer_ip"])):
                run_cmd(["ip", "-n", ns, "link", "set", "dev", dev, "gso_max_segs", "1",
                         "gso_max_size", "1500"])
                run_cmd(["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev])
                run_cmd(["ip", "-n", ns, "link", "set", "dev", dev, "up"])
            if s["name"] == "loss":
                for ns, dev in ((pns, pi), (self.nsA, ai)):
                    run_cmd(nsx(ns, "iptables", "-t", "raw", "-N", "CWLOSS"))
                    run_cmd(nsx(ns, "iptables", "-t", "raw", "-A", "PREROUTING", "-i", dev,
                                "-j", "CWLOSS"))
            elif s["name"] == "incast":
                ifb = f"{self.P}icf"
                im = s["impairment"]
                run_cmd(["ip", "-n", pns, "link", "add", ifb, "type", "ifb"])
                run_cmd(["ip", "-n", pns, "link", "set", "dev", ifb, "up"])
                run_cmd(["tc", "-n", pns, "qdisc", "add", "dev", pi, "handle", "ffff:",
                         "ingress"])
                run_cmd(["tc", "-n", pns, "filter", "add", "dev", pi, "parent", "ffff:",
                         "protocol", "ip", "u32", "match", "u32", "0", "0", "action",
                         "mirred", "egress", "redirect", "dev", ifb])
                run_cmd(["tc", "-n", pns, "qdisc", "add", "dev", ifb, "root", "tbf", "rate",
                         im["rate"], "burst", str(im["burst"]), "limit", str(im["limit"])])
                im["ifb"] = ifb
            if s["impairment"].get("a_egress_rate"):
                im = s["impairment"]
                run_cmd(["tc", "-n", self.nsA, "qdisc", "add", "dev", ai, "root", "tbf", "rate",
                         im["a_egress_rate"], "burst", str(im["a_egress_burst"]), "limit",
                         str(im["a_egress_limit"])])
        # addresses are up; wait out nothing (IPv6 off, no DAD); check reachability cheaply
        for s in self.plan["scenarios"]:
            run_cmd(["ip", "-n", self.nsA, "neigh", "flush", "dev", s["a_ifname"]], check=False)

    def write_topology(self):
        if not self.a.topology:
            return
        lines = [f"link {s['link']} {s['a_ip']}/32 {s['peer_ip']}/32"
                 for s in self.plan["scenarios"]]
        lines += [f"app {s['name']} {s['server_port']}" for s in self.plan["scenarios"]]
        atomic_write(self.a.topology, "\n".join(lines) + "\n")

    def write_labels(self):
        lab = json.loads(json.dumps(self.plan))
        for s in lab["scenarios"]:
            s.pop("params", None)
        if self.a.labels:
            atomic_write(self.a.labels, json.dumps(lab, indent=1) + "\n")
        return lab

    # -- run
    def run(self):
        a = self.a
        t_start = self.t_start
        self.setup()
        self.log("namespaces, links and impairments set up")
        sel = a.selfcheck
        ss_path = a.ss or (os.path.join(self.rundir, "ss.log") if sel else None)
        ti_path = a.tcpinfo or (os.path.join(self.rundir, "tcpinfo.jsonl") if sel else None)
        self.ss_path, self.ti_path = ss_path, ti_path

        # planned times; t0 leaves time for the tools and the connections to start
        t0 = time.time() + a.warmup
        self.plan["t0"] = round(t0, 6)
        self.plan["end"] = round(t0 + a.duration, 6)
        for s in self.plan["scenarios"]:
            im = s["impairment"]
            if im["kind"] == "loss":
                t = t0 + im["first_on_s"]
                while t < t0 + a.duration:
                    im["planned_on"].append([round(t, 3), round(min(t + im["on_s"],
                                                                    t0 + a.duration), 3)])
                    t += im["on_s"] + im["off_s"]
            if im["kind"] == "slow_reader":
                t = t0 + im["first_pause_s"]
                while t < t0 + a.duration:
                    im["pauses"].append([round(t, 3), round(min(t + im["pause_s"],
                                                                t0 + a.duration), 3)])
                    t += im["pause_period_s"]
        self.plan_path = os.path.join(self.rundir, "plan.json")
        with open(self.plan_path, "w") as fh:
            json.dump(self.plan, fh)
        self.write_topology()
        self.write_labels()

        # delay line first (the NFQUEUE rule bypasses until it is bound, but then it holds)
        for s in self.plan["scenarios"]:
            if s["impairment"]["kind"] == "delay":
                self.spawn("delay", s["peer_namespace"], self.worker_argv(f"delay:{s['name']}"))
                if not self.wait_file(os.path.join(self.rundir, "delay.out"), "ready", 5,
                                      proc="delay"):
                    raise RuntimeError("delay line did not start: " + open(
                        os.path.join(self.rundir, "delay.err")).read())
                run_cmd(nsx(s["peer_namespace"], "iptables", "-t", "mangle", "-A",
                            "PREROUTING", "-i", s["peer_ifname"], "-p", "tcp", "-j", "NFQUEUE",
                            "--queue-num", "0", "--queue-bypass"))

        # captures in A
        if a.pcap:
            self.spawn("tcpdump", self.nsA, ["tcpdump", "-i", "any", "-w", a.pcap, "-s", "128",
                                             "-U", "-Z", "root"])
            if not self.wait_file(os.path.join(self.rundir, "tcpdump.err"), "listening on", 5,
                                      proc="tcpdump"):
                raise RuntimeError("tcpdump did not start: " + open(
                    os.path.join(self.rundir, "tcpdump.err")).read())
        if a.peer_pcaps:
            # The other end of every connection: a capture in each peer host.
            os.makedirs(a.peer_pcaps, exist_ok=True)
            for s in self.plan["scenarios"]:
                name = f"tcpdump-{s['name']}"
                self.spawn(name, s["peer_namespace"],
                           ["tcpdump", "-i", "any", "-w",
                            os.path.join(a.peer_pcaps, f"{s['name']}.pcap"), "-s", "128", "-U",
                            "-Z", "root"])
                if not self.wait_file(os.path.join(self.rundir, f"{name}.err"), "listening on",
                                      5, proc=name):
                    raise RuntimeError(f"{name} did not start")
        if ss_path:
            self.files["ss"] = open(ss_path, "w")
            self.spawn("ss", self.nsA, ["sh", "-c", 'trap "exit 0" TERM; while sleep 0.25; do '
                                        'echo "### $(date +%s.%N)"; ss -tinm; done'],
                       stdout=self.files["ss"])
        if ti_path:
            self.spawn("tcpinfo", self.nsA, self.worker_argv("tcpinfo", ti_path))
        if a.monitor:
            env = dict(os.environ, CW_PREFIX=self.P, CW_NS_A=self.nsA,
                       CW_LABELS=os.path.abspath(a.labels) if a.labels else "",
                       CW_TOPOLOGY=os.path.abspath(a.topology) if a.topology else "",
                       CW_T0=str(self.plan["t0"]), CW_DURATION=str(a.duration))
            self.spawn("monitor", self.nsA, ["sh", "-c", a.monitor], env=env)

        self.log("captures started")
        self.mib_before = read_mibs(self.created)
        for s in self.plan["scenarios"]:
            self.spawn(f"peer-{s['name']}", s["peer_namespace"],
                       self.worker_argv(f"peer:{s['name']}"))
        time.sleep(0.1)
        for s in self.plan["scenarios"]:
            self.spawn(f"a-{s['name']}", self.nsA, self.worker_argv(f"a:{s['name']}"))
        if time.time() > t0 - 0.1:
            print(f"faults: warning: setup took until {time.time() - t0:+.2f} s of t0; "
                  "consider a larger --warmup", file=sys.stderr)

        self.log(f"workers started; traffic from t0 = {self.plan['t0'] - t_start:+.2f} s")
        self.loss_schedule()
        self.log("traffic over")

        # wait for the workers (they close their sockets at end + linger)
        deadline = self.plan["end"] + a.linger + 3.0
        for name in list(self.procs):
            if name.startswith(("a-", "peer-")):
                p = self.procs[name]
                try:
                    p.wait(max(0.1, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    print(f"faults: {name} overran, killing", file=sys.stderr)
                    self.stop(name, signal.SIGKILL)
        self.log("workers exited")
        self.stop("delay", signal.SIGTERM, wait=2.0)
        self.mib_after = read_mibs(self.created)
        self.stop_all([("ss", signal.SIGTERM, 2.0, False), ("tcpinfo", signal.SIGTERM, 2.0, True),
                       ("monitor", signal.SIGINT, 10.0, True),
                       ("tcpdump", signal.SIGINT, 5.0, False)]
                      + [(f"tcpdump-{s['name']}", signal.SIGINT, 5.0, False)
                         for s in self.plan["scenarios"] if a.peer_pcaps])
        for f in self.files.values():
            f.close()
        self.log("captures stopped")
        self.collect()
        lab = self.write_labels()
        rc = 0
        if sel:
            rc = self.selfcheck(lab)
        print(f"faults: done in {time.time() - t_start:.1f} s (traffic {a.duration:g} s)",
              file=sys.stderr)
        return rc

    def loss_schedule(self):
        """Switch loss on and off at the planned times (main thread); record actual times."""
        sc = next((s for s in self.plan["scenarios"] if s["impairment"]["kind"] == "loss"), None)
        if sc is None:
            sleep_until(self.plan["end"])
            return
        im = sc["impairment"]
        rnd = ["-m", "statistic", "--mode", "random", "--probability", str(im["rate"]), "-j",
               "DROP"]
        blackout_cmd = ["iptables", "-t", "raw", "-A", "CWLOSS", "-j", "DROP"]
        random_cmd = ["iptables", "-t", "raw", "-A", "CWLOSS"] + rnd
        to_random_cmd = ["iptables", "-t", "raw", "-R", "CWLOSS", "1"] + rnd
        off_cmd = ["iptables", "-t", "raw", "-F", "CWLOSS"]
        nss = [sc["peer_namespace"], self.nsA]

        def both(cmd):
            ps = [subprocess.Popen(nsx(ns, *cmd), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE) for ns in nss]
            for p in ps:
                _, e = p.communicate()
                if p.returncode:
                    raise RuntimeError(f"iptables: {e.decode().strip()}")
            return time.time()

        for on, off in im["planned_on"]:
            sleep_until(on - 0.01)
            bo = min(im["blackout_s"], off - on)
            if bo > 0:
                t1 = both(blackout_cmd)
                sleep_until(on + bo - 0.01)
                tb = both(to_random_cmd) if bo < off - on else None
                im["blackouts"].append([round(t1, 3), round(tb or time.time(), 3)])
            else:
                t1 = both(random_cmd)
            sleep_until(off - 0.01)
            t2 = both(off_cmd)
            im["on"].append([round(t1, 3), round(t2, 3)])
        sleep_until(self.plan["end"])

    def collect(self):
        for name, p in self.procs.items():
            path = os.path.join(self.rundir, name + ".out")
            if not name.startswith(("a-", "peer-", "delay")) or not os.path.exists(path):
                continue
            with open(path) as fh:
                for ln in fh:
                    ln = ln.strip()
                    if ln.startswith("{"):
                        try:
                            self.summaries[name] = json.loads(ln)
                        except ValueError:
                            pass
            err = open(os.path.join(self.rundir, name + ".err")).read().strip()
            if err:
                print(f"faults: {name} stderr: {err[-2000:]}", file=sys.stderr)
            if p.returncode not in (0, None):
                print(f"faults: {name} exited {p.returncode}", file=sys.stderr)
            sm = self.summaries.get(name, {})
            for e in sm.get("errors", []):
                print(f"faults: {name}: {e}", file=sys.stderr)
        inc = self.summaries.get("peer-incast")
        for s in self.plan["scenarios"]:
            if s["name"] == "incast" and inc:
                s["rounds"] = inc.get("rounds", [])

    def selfcheck(self, lab):
        sys.path.insert(0, HERE)
        sys.dont_write_bytecode = True  # no __pycache__ in the source tree
        import check_ss
        ssc = check_ss.parse_ss_log(self.ss_path)
        tic = check_ss.parse_tcpinfo_log(self.ti_path)
        res = check_ss.evaluate(lab, ssc, tic)
        mib = {}
        for ns in self.created:
            b, af = self.mib_before.get(ns, {}), self.mib_after.get(ns, {})
            d = {k: af.get(k, 0) - b.get(k, 0) for k in MIB_KEYS if af.get(k, 0) - b.get(k, 0)}
            mib[ns] = d
        # scenario-level evidence from the namespaces' own MIBs
        extra = []
        ok_all = all(s["ok"] for s in res)
        for s in lab["scenarios"]:
            pm = mib.get(s["peer_namespace"], {})
            if s["name"] == "nagle":
                good = pm.get("DelayedACKs", 0) > 0
                extra.append(f"nagle: peer DelayedACKs={pm.get('DelayedACKs', 0)} "
                             f"({'ok' if good else 'BAD'})")
                ok_all &= good
            if s["name"] == "slow":
                good = pm.get("TCPToZeroWindowAdv", 0) > 0
                extra.append(f"slow: peer TCPToZeroWindowAdv={pm.get('TCPToZeroWindowAdv', 0)}")
            if s["name"] == "incast":
                rs = s.get("rounds", [])
                if rs:
                    dur = sorted(r[1] - r[0] for r in rs)
                    extra.append(f"incast: {len(rs)} rounds, answer time median "
                                 f"{dur[len(dur) // 2] * 1000:.0f} ms, max {dur[-1] * 1000:.0f} ms")
            if s["name"] == "loss":
                extra.append("loss: on " + " ".join(
                    f"[{x - lab['t0']:.2f},{y - lab['t0']:.2f}]" for x, y in s["impairment"]["on"])
                    + " s after t0")
        am = mib.get(self.nsA, {})
        extra.append(f"A: TCPTimeouts={am.get('TCPTimeouts', 0)} "
                     f"TCPFastRetrans={am.get('TCPFastRetrans', 0)} "
                     f"TCPLossProbes={am.get('TCPLossProbes', 0)}")
        print(check_ss.report_text(res, mib))
        print("\n" + "\n".join(extra))
        print("\nSELFCHECK " + ("PASS" if ok_all else "FAIL"))
        if self.a.report:
            atomic_write(self.a.report, json.dumps({
                "labels": lab, "results": res, "mib": mib, "notes": extra,
                "workers": self.summaries, "pass": ok_all}, indent=1, default=str) + "\n")
        return 0 if ok_all else 1

    # -- cleanup
    def cleanup(self):
        if self.cleaned:
            return
        self.cleaned = True
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        live = [(n, p) for n, p in self.procs.items() if p.poll() is None]
        for n, p in live:
            s = signal.SIGINT if n in ("monitor", "tcpdump") else signal.SIGTERM
            try:
                os.killpg(p.pid, s)
            except ProcessLookupError:
                pass
        t = time.time() + (10.0 if any(n == "monitor" for n, _ in live) else 2.0)
        for n, p in live:
            try:
                p.wait(max(0.05, t - time.time()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                try:
                    p.wait(2)
                except subprocess.TimeoutExpired:
                    pass
        for f in self.files.values():
            try:
                f.close()
            except OSError:
                pass
        remove_namespaces([ns for ns in self.created])
        shutil.rmtree(self.rundir, ignore_errors=True)
        self.log("cleaned up")


def atomic_write(path, text):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def cleanup_prefix(prefix):
    nss = our_namespaces(prefix)
    remove_namespaces(nss)
    dirs = glob.glob(os.path.join(tempfile.gettempdir(), f"faults-{prefix}-*"))
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
    print(f"faults: removed namespaces {nss or '[]'} and {len(dirs)} run directories")


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="TCP fault-injection scenarios in network namespaces (see the file's "
                    "docstring).", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--prefix", default=f"cw{os.getpid()}",
                    help="name prefix of namespaces and interfaces (<= 11 chars)")
    ap.add_argument("--cleanup", metavar="PREFIX", help="remove what a run with PREFIX left")
    ap.add_argument("--duration", type=float, default=12.0, help="seconds of traffic")
    ap.add_argument("--warmup", type=float, default=0.8,
                    help="seconds between setup and traffic start (connections open)")
    ap.add_argument("--linger", type=float, default=0.5,
                    help="seconds the connections stay open after the traffic")
    ap.add_argument("--scenarios", default=",".join(scenario_names()),
                    help="comma-separated subset")
    ap.add_argument("--net", default="10.77", help="first two octets of the /24s")
    ap.add_argument("--cc", default="cubic", help="TCP congestion control of every scenario "
                    "socket (set per socket)")
    ap.add_argument("--labels", help="write the ground-truth labels (JSON) here")
    ap.add_argument("--topology", help="write the link/app topology (text) here")
    ap.add_argument("--pcap", help="tcpdump -i any -s 128 inside A into this file")
    ap.add_argument("--peer-pcaps", metavar="DIR",
                    help="tcpdump -i any -s 128 in every peer host too, into DIR/<scenario>.pcap "
                         "(each connection then captured at both its ends)")
    ap.add_argument("--ss", help="ss -tinm every 0.25 s inside A into this file")
    ap.add_argument("--tcpinfo", help="netlink tcp_info poll every 0.25 s into this file")
    ap.add_argument("--monitor", metavar="CMD", help="shell command run inside A meanwhile")
    ap.add_argument("--selfcheck", action="store_true",
                    help="judge every connection from the kernel's counters")
    ap.add_argument("--report", help="with --selfcheck: write the evidence (JSON) here")
    ap.add_argument("--loss-rate", type=float, default=0.1,
                    help="loss scenario: drop probability while on (each direction)")
    ap.add_argument("--loss-on", type=float, default=2.0, help="loss scenario: on seconds")
    ap.add_argument("--loss-blackout", type=float, default=0.6,
                    help="loss scenario: seconds of 100%% loss at the start of each on phase")
    ap.add_argument("--loss-off", type=float, default=2.0, help="loss scenario: off seconds")
    ap.add_argument("--delay-ms", type=float, default=20.0,
                    help="sndbuf scenario: one-way delay A->peer")
    ap.add_argument("--sndbuf", type=int, default=8192, help="sndbuf scenario: SO_SNDBUF")
    ap.add_argument("--incast-workers", type=int, default=8,
                    help="incast scenario: number of worker connections")
    ap.add_argument("-v", "--verbose", action="store_true", help="print phase times")
    ap.add_argument("--set", action="append", metavar="SCEN.KEY=VALUE",
                    help="override a scenario parameter (see the labels' impairment and the "
                         "plan's params), e.g. --set incast.rate=50mbit; repeatable")
    # internal
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--plan", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    for kv in a.set or []:
        if "=" not in kv or "." not in kv.split("=", 1)[0]:
            ap.error(f"--set {kv}: expected SCENARIO.KEY=VALUE")
    a.scenarios = [x.strip() for x in a.scenarios.split(",") if x.strip()]
    bad = [x for x in a.scenarios if x not in scenario_names()]
    if bad:
        ap.error(f"unknown scenarios {bad}; known: {scenario_names()}")
    if not a.worker and not a.cleanup:
        if len(a.prefix) > 11 or not a.prefix.replace("_", "").isalnum():
            ap.error("--prefix must be alphanumeric and at most 11 characters")
        if a.duration <= 0 or a.duration > 600:
            ap.error("--duration must be in (0, 600]")
        if a.report and not a.selfcheck:
            ap.error("--report needs --selfcheck")
    return a


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    if a.worker:
        worker_main(a.worker, a.plan, a.out)
        return 0
    if os.geteuid() != 0:
        print("faults: needs root (network namespaces)", file=sys.stderr)
        return 2
    if a.cleanup:
        cleanup_prefix(a.cleanup)
        return 0
    if our_namespaces(a.prefix):
        print(f"faults: namespaces with prefix {a.prefix} exist; use --cleanup {a.prefix}",
              file=sys.stderr)
        return 2
    plan = make_plan(a)
    run = Run(a, plan)
    atexit.register(run.cleanup)

    def on_signal(signum, frame):
        raise SystemExit(128 + signum)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        return run.run()
    except RuntimeError as e:
        print(f"faults: {e}", file=sys.stderr)
        return 2
    finally:
        run.cleanup()


if __name__ == "__main__":
    sys.exit(main())
