//! The preload library on real programs: curl against python's http.server, a multithreaded
//! Rust program (this test binary, re-run as a child), a forking python server, UNIX-domain
//! sockets, UDP, exec chains. Each test checks that the programs' own output is unchanged and
//! that the logs parse and say what the programs did: calls, endpoints, byte counts on both
//! sides, datagram hashes.
//!
//! Every child process is waited for at most [`LIMIT`]; all traffic is on loopback. The
//! library is `target/<profile>/libcauseway_preload.so`, built by `cargo test` for this
//! package (or by `cargo build -p causeway-preload`).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use causeway_capture::{
    Call, Direction, Endpoint, LogHeader, Origin, Record, Syscall, payload_hash, read_dir,
};

/// Longest any child process may run.
const LIMIT: Duration = Duration::from_secs(60);

/// The library, rebuilt once per test run if its sources changed (`cargo test` does not build
/// a cdylib for integration tests).
fn preload_lib() -> PathBuf {
    static LIB: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    LIB.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        // target/<profile>/deps/live-<hash>
        let profile_dir = exe.parent().unwrap().parent().unwrap();
        let lib = profile_dir.join("libcauseway_preload.so");
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.args(["build", "-p", "causeway-preload"]);
        if release {
            cmd.arg("--release");
        }
        match cmd.status() {
            Ok(s) => assert!(s.success(), "building the preload library failed"),
            // No cargo (the test binary run by hand): use what is there.
            Err(e) => eprintln!("cannot run cargo ({e}); using {}", lib.display()),
        }
        assert!(lib.exists(), "{} missing", lib.display());
        lib
    })
    .clone()
}

fn python() -> PathBuf {
    // The real interpreter, not a version-manager shim (which would log its own processes).
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 is needed for these tests");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// A capture directory and commands that run under the library.
struct Capture {
    dir: tempfile::TempDir,
    lib: PathBuf,
}

impl Capture {
    fn new() -> Capture {
        Capture {
            dir: tempfile::tempdir().unwrap(),
            lib: preload_lib(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn cmd(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        c.env("LD_PRELOAD", &self.lib)
            .env("CAUSEWAY_CAPTURE_DIR", self.path())
            .stdin(Stdio::null());
        c
    }

    /// Every log in the directory, parsed; fails the test on any error.
    fn logs(&self) -> Vec<Log> {
        read_dir(self.path())
            .unwrap()
            .into_iter()
            .map(|f| {
                let reader = causeway_capture::open(&f.path).unwrap();
                let header = reader.header().clone();
                let name = f.name.to_string();
                let records: Vec<Record> = reader
                    .map(|r| r.unwrap_or_else(|e| panic!("{e}")))
                    .collect();
                Log {
                    name,
                    header,
                    records,
                }
            })
            .collect()
    }
}

#[derive(Debug)]
struct Log {
    name: String,
    header: LogHeader,
    records: Vec<Record>,
}

impl Log {
    fn closed(&self) -> bool {
        self.records
            .last()
            .is_some_and(|r| r.syscall == Syscall::End)
    }

    fn calls(&self, call: Call) -> Vec<&Record> {
        self.records
            .iter()
            .filter(|r| r.syscall.call() == call)
            .collect()
    }

    /// Bytes moved in `dir` on `fd`, in time order, from `from_ns` up to the close of `fd`.
    fn bytes_on(&self, fd: i32, dir: Direction, from_ns: u64) -> u64 {
        let mut recs: Vec<&Record> = self
            .records
            .iter()
            .filter(|r| r.time_ns >= from_ns)
            .collect();
        recs.sort_by_key(|r| r.time_ns);
        let mut total = 0;
        for r in recs {
            if r.fd != fd {
                continue;
            }
            if r.syscall.call() == Call::Close {
                break;
            }
            if r.syscall.direction() == Some(dir) {
                total += r.bytes().unwrap_or(0);
            }
        }
        total
    }
}

fn wait(mut child: Child) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "child ran over {LIMIT:?}: stdout {} stderr {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn run(mut cmd: Command) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait(child);
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Starts a server that prints its port on the first line of stdout.
fn start_server(mut cmd: Command) -> (Child, u16, BufReader<std::process::ChildStdout>) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    // A server that never prints would block here; the servers below print before anything.
    out.read_line(&mut line).unwrap();
    let port = line
        .split_whitespace()
        .filter_map(|w| w.parse::<u16>().ok())
        .next()
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    (child, port, out)
}

/// Asks `child` to exit (SIGTERM, which the servers here handle by exiting cleanly).
fn terminate(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

fn inet(s: &str) -> Endpoint {
    Endpoint::Inet(s.parse::<SocketAddr>().unwrap())
}

fn find<'a>(logs: &'a [Log], what: &str, pred: impl Fn(&Log) -> bool) -> &'a Log {
    let found: Vec<&Log> = logs.iter().filter(|l| pred(l)).collect();
    assert_eq!(
        found.len(),
        1,
        "{what}: {:?}",
        logs.iter()
            .map(|l| (&l.name, &l.header.argv))
            .collect::<Vec<_>>()
    );
    found[0]
}

#[test]
fn curl_against_python_http_server() {
    let cap = Capture::new();
    let site = tempfile::tempdir().unwrap();
    let body: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(site.path().join("file.bin"), &body).unwrap();
    let mut server = cap.cmd(python());
    // `python3 -m http.server`, exiting cleanly (so that the library writes its end-of-log
    // record) on SIGTERM: SIGINT may be ignored when the tests run in the background.
    server.args([
        "-u",
        "-c",
        "import runpy, signal, sys\n\
         signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n\
         sys.argv = sys.argv[1:]\n\
         runpy.run_module('http.server', run_name='__main__')",
        "http.server",
        "--bind",
        "127.0.0.1",
        "0",
        "--directory",
    ]);
    server.arg(site.path());
    let (server, port, _stdout) = start_server(server);

    let got = tempfile::tempdir().unwrap();
    let out_file = got.path().join("out.bin");
    let mut curl = cap.cmd("curl");
    curl.args(["-s", "-S", "--max-time", "30", "-o"])
        .arg(&out_file);
    curl.arg(format!("http://127.0.0.1:{port}/file.bin"));
    run(curl);
    terminate(&server);
    let out = wait(server);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read(&out_file).unwrap(),
        body,
        "curl's download changed"
    );

    let logs = cap.logs();
    let curl = find(&logs, "curl", |l| l.header.exe.ends_with("curl"));
    let server = find(&logs, "server", |l| {
        l.header.argv.iter().any(|a| a == "http.server")
    });
    assert!(curl.closed() && server.closed(), "both exited cleanly");
    assert_eq!(curl.header.origin, Origin::Start);

    // curl: connect to the server (non-blocking: EINPROGRESS or success), both names logged.
    let connects: Vec<&Record> = curl
        .calls(Call::Connect)
        .into_iter()
        .filter(|r| r.peer == Some(inet(&format!("127.0.0.1:{port}"))))
        .collect();
    assert_eq!(connects.len(), 1, "{:?}", curl.records);
    let c = connects[0];
    assert!(
        c.ret == 0 || c.errno == Some(libc::EINPROGRESS as u16),
        "{c:?}"
    );
    let Some(Endpoint::Inet(local)) = c.local.clone() else {
        panic!("no local endpoint: {c:?}")
    };
    assert_eq!(local.ip().to_string(), "127.0.0.1");
    assert_ne!(local.port(), 0);

    // server: the accept of that connection, with both names, though python passes a buffer
    // and curl's local port must match.
    let accepts: Vec<&Record> = server
        .calls(Call::Accept)
        .into_iter()
        .filter(|r| r.ret >= 0)
        .collect();
    assert_eq!(accepts.len(), 1, "{:?}", server.records);
    let a = accepts[0];
    assert_eq!(a.local, Some(inet(&format!("127.0.0.1:{port}"))));
    assert_eq!(a.peer, Some(Endpoint::Inet(local)));
    assert_eq!(a.fd2, Some(a.ret as i32));
    assert!(a.socket.is_some_and(|k| k.is_stream() && k.is_inet()));

    // Bytes: what one side sent, the other received.
    let conn = a.ret as i32;
    let curl_sent = curl.bytes_on(c.fd, Direction::Send, c.time_ns);
    let curl_recv = curl.bytes_on(c.fd, Direction::Recv, c.time_ns);
    let srv_sent = server.bytes_on(conn, Direction::Send, a.time_ns);
    let srv_recv = server.bytes_on(conn, Direction::Recv, a.time_ns);
    assert!(curl_sent > 0 && curl_recv > body.len() as u64);
    assert_eq!(curl_sent, srv_recv, "request bytes");
    assert_eq!(srv_sent, curl_recv, "response bytes");
    // Stream sockets carry no datagram hash.
    assert!(
        curl.records
            .iter()
            .all(|r| r.hash.is_none() || r.fd != c.fd)
    );
}

/// The child half of `many_threads_writing`: run when the test binary is re-run with
/// `CW_CHILD=threads`.
fn threads_child() {
    const THREADS: usize = 8;
    const WRITES: usize = 2000;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let mut handlers = Vec::new();
        for _ in 0..THREADS {
            let (mut s, _) = listener.accept().unwrap();
            handlers.push(std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut total = 0u64;
                loop {
                    let n = s.read(&mut buf).unwrap();
                    if n == 0 {
                        break total;
                    }
                    total += n as u64;
                }
            }));
        }
        handlers.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
    });
    let clients: Vec<_> = (0..THREADS)
        .map(|t| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                // The same socket as a File: its writes are write(2), as in C programs.
                let mut f = std::fs::File::from(std::os::fd::OwnedFd::from(s.try_clone().unwrap()));
                let data = vec![t as u8; 300];
                let mut sent = 0u64;
                for i in 0..WRITES {
                    let len = 1 + (i * 7 + t) % 200;
                    if t % 2 == 0 {
                        s.write_all(&data[..len]).unwrap();
                    } else {
                        f.write_all(&data[..len]).unwrap();
                    }
                    sent += len as u64;
                }
                sent
            })
        })
        .collect();
    let sent: u64 = clients.into_iter().map(|c| c.join().unwrap()).sum();
    let received = server.join().unwrap();
    println!("RESULT sent {sent} received {received}");
}

#[test]
fn child_entry() {
    if std::env::var("CW_CHILD").as_deref() == Ok("threads") {
        threads_child();
    }
}

#[test]
fn many_threads_writing() {
    let cap = Capture::new();
    let mut cmd = cap.cmd(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "child_entry",
        "--nocapture",
        "--test-threads",
        "1",
    ]);
    cmd.env("CW_CHILD", "threads");
    let out = run(cmd);
    let stdout = String::from_utf8(out.stdout).unwrap();
    // libtest prints the result on the line of the test's name.
    let result = stdout
        .lines()
        .find_map(|l| l.find("RESULT").map(|i| l[i..].trim_end()))
        .expect("child result");
    // The expected totals, computed the way the child does.
    let expected: u64 = (0..8)
        .map(|t| {
            (0..2000)
                .map(|i| (1 + (i * 7 + t) % 200) as u64)
                .sum::<u64>()
        })
        .sum();
    assert_eq!(
        result,
        format!("RESULT sent {expected} received {expected}")
    );

    let logs = cap.logs();
    let log = find(&logs, "child", |l| {
        l.header.argv.iter().any(|a| a == "child_entry")
    });
    assert!(log.closed());
    let sent: u64 = log
        .records
        .iter()
        .filter(|r| r.syscall.direction() == Some(Direction::Send))
        .filter_map(Record::bytes)
        .sum();
    let received: u64 = log
        .records
        .iter()
        .filter(|r| r.syscall.direction() == Some(Direction::Recv))
        .filter_map(Record::bytes)
        .sum();
    assert_eq!((sent, received), (expected, expected));
    // Every write was logged, from its own thread: 8 client threads, 8 handler threads.
    let writes = log
        .records
        .iter()
        .filter(|r| r.syscall == Syscall::Write)
        .count();
    let sends = log
        .records
        .iter()
        .filter(|r| r.syscall == Syscall::Send)
        .count();
    assert!(
        writes >= 4 * 2000 && sends >= 4 * 2000,
        "{writes} writes, {sends} sends"
    );
    let mut tids: BTreeMap<u32, usize> = BTreeMap::new();
    for r in &log.records {
        if r.syscall.direction() == Some(Direction::Send) {
            *tids.entry(r.tid).or_default() += 1;
        }
    }
    assert_eq!(tids.len(), 8, "{tids:?}");
    // Within a thread, records are in time order.
    let mut last: BTreeMap<u32, u64> = BTreeMap::new();
    for r in &log.records {
        let t = last.entry(r.tid).or_default();
        assert!(r.time_ns >= *t, "thread {} went back in time", r.tid);
        *t = r.time_ns;
    }
}

const FORKING_SERVER: &str = r#"
import socketserver, sys
class H(socketserver.BaseRequestHandler):
    def handle(self):
        data = b''
        while not data.endswith(b'\n'):
            chunk = self.request.recv(4096)
            if not chunk:
                break
            data += chunk
        self.request.sendall(data.upper())
srv = socketserver.ForkingTCPServer(('127.0.0.1', 0), H)
print('port', srv.server_address[1], flush=True)
for _ in range(int(sys.argv[1])):
    srv.handle_request()
srv.server_close()
"#;

const CLIENT: &str = r#"
import socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
for i in range(n):
    s = socket.create_connection(('127.0.0.1', port), timeout=20)
    s.sendall(b'hello number %d\n' % i)
    reply = b''
    while not reply.endswith(b'\n'):
        chunk = s.recv(4096)
        if not chunk:
            break
        reply += chunk
    print(reply.decode().strip())
    s.close()
"#;

#[test]
fn forking_server() {
    const N: usize = 4;
    let cap = Capture::new();
    let mut server = cap.cmd(python());
    server.args(["-u", "-c", FORKING_SERVER, &N.to_string()]);
    let (server, port, _stdout) = start_server(server);
    let mut client = cap.cmd(python());
    client.args(["-c", CLIENT, &port.to_string(), &N.to_string()]);
    let out = run(client);
    let expected: String = (0..N).map(|i| format!("HELLO NUMBER {i}\n")).collect();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), expected);
    let out = wait(server);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let logs = cap.logs();
    let parent = find(&logs, "server", |l| {
        l.header.origin == Origin::Start
            && l.header.argv.iter().any(|a| a.contains("ForkingTCPServer"))
    });
    let client = find(&logs, "client", |l| {
        l.header
            .argv
            .iter()
            .any(|a| a.contains("create_connection"))
    });
    let accepts: Vec<&Record> = parent
        .calls(Call::Accept)
        .into_iter()
        .filter(|r| r.ret >= 0)
        .collect();
    let forks: Vec<&Record> = parent
        .calls(Call::Fork)
        .into_iter()
        .filter(|r| r.ret > 0)
        .collect();
    assert_eq!((accepts.len(), forks.len()), (N, N));
    let children: Vec<&Log> = logs
        .iter()
        .filter(|l| l.header.origin == Origin::Fork)
        .collect();
    assert_eq!(children.len(), N);
    let client_conns: Vec<&Record> = client.calls(Call::Connect);
    assert_eq!(client_conns.len(), N);
    for (i, child) in children.iter().enumerate() {
        assert_eq!(child.header.ppid, parent.header.pid);
        assert_eq!(child.header.previous.as_deref(), Some(parent.name.as_str()));
        assert!(forks.iter().any(|f| f.ret == i64::from(child.header.pid)));
        assert!(
            child.closed(),
            "the child left through os._exit: {:?}",
            child.records
        );
        assert_eq!(child.records[0].syscall, Syscall::Fork);
        assert_eq!(child.records[0].ret, 0);
        // The child serves one connection on the descriptor it inherited.
        let recvd: u64 = child
            .records
            .iter()
            .filter(|r| r.syscall.direction() == Some(Direction::Recv))
            .filter_map(Record::bytes)
            .sum();
        let sent: u64 = child
            .records
            .iter()
            .filter(|r| r.syscall.direction() == Some(Direction::Send))
            .filter_map(Record::bytes)
            .sum();
        assert!(recvd > 0, "child {i}: {:?}", child.records);
        assert_eq!(recvd, sent, "child {i} echoes what it read");
        // Which client connection it served: the accept before the fork names the peer.
        let fork = forks
            .iter()
            .find(|f| f.ret == i64::from(child.header.pid))
            .unwrap();
        let accept = accepts
            .iter()
            .filter(|a| a.time_ns <= fork.time_ns)
            .max_by_key(|a| a.time_ns)
            .unwrap();
        let conn = client_conns
            .iter()
            .find(|c| c.local == accept.peer)
            .expect("matching client");
        let client_sent = client.bytes_on(conn.fd, Direction::Send, conn.time_ns);
        let client_recv = client.bytes_on(conn.fd, Direction::Recv, conn.time_ns);
        assert_eq!((client_sent, client_recv), (recvd, sent));
    }
}

const UNIX_SERVER: &str = r#"
import os, socket, sys
path = sys.argv[1]
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(path)
srv.listen()
print('ready 0', flush=True)
conn, _ = srv.accept()
data = conn.recv(100)
conn.sendall(data[::-1])
conn.close()
a, b = socket.socketpair()
a.sendall(b'pair')
print(b.recv(10).decode(), flush=True)
"#;

const UNIX_CLIENT: &str = r#"
import socket, sys
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
c.connect(sys.argv[1])
c.sendall(b'abcdef')
print(c.recv(100).decode())
"#;

#[test]
fn unix_sockets() {
    let cap = Capture::new();
    let sock_dir = tempfile::tempdir().unwrap();
    let path = sock_dir.path().join("s");
    let path_s = path.to_str().unwrap().to_string();
    let mut server = cap.cmd(python());
    server.args(["-u", "-c", UNIX_SERVER, &path_s]);
    let (server, _, mut server_out) = start_server(server);
    let mut client = cap.cmd(python());
    client.args(["-c", UNIX_CLIENT, &path_s]);
    let out = run(client);
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "fedcba\n");
    let out = wait(server);
    assert!(out.status.success());
    let mut rest = String::new();
    server_out.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "pair\n");

    let logs = cap.logs();
    let server = find(&logs, "server", |l| {
        l.header.argv.iter().any(|a| a.contains("socketpair"))
    });
    let client = find(&logs, "client", |l| {
        l.header.argv.iter().any(|a| a.contains("c.connect"))
    });
    let unix_path = Endpoint::Unix(path_s.as_bytes().to_vec());
    let bind = &server.calls(Call::Bind)[0];
    assert_eq!(bind.local, Some(unix_path.clone()));
    let listen = &server.calls(Call::Listen)[0];
    assert_eq!(listen.local, Some(unix_path.clone()));
    let accept = server
        .calls(Call::Accept)
        .into_iter()
        .find(|r| r.ret >= 0)
        .unwrap();
    assert_eq!(accept.local, Some(unix_path.clone()));
    assert_eq!(
        accept.peer,
        Some(Endpoint::Unix(Vec::new())),
        "the client is unnamed"
    );
    assert_eq!(accept.peer_pid, Some(client.header.pid));
    let connect = &client.calls(Call::Connect)[0];
    assert_eq!(connect.ret, 0);
    assert_eq!(connect.peer, Some(unix_path));
    assert_eq!(connect.peer_pid, Some(server.header.pid));
    assert!(connect.socket.is_some_and(|k| k.is_unix() && k.is_stream()));
    let conn = accept.ret as i32;
    assert_eq!(server.bytes_on(conn, Direction::Recv, accept.time_ns), 6);
    assert_eq!(
        client.bytes_on(connect.fd, Direction::Send, connect.time_ns),
        6
    );
    assert_eq!(server.bytes_on(conn, Direction::Send, accept.time_ns), 6);
    assert_eq!(
        client.bytes_on(connect.fd, Direction::Recv, connect.time_ns),
        6
    );
    // socketpair: both descriptors, then four bytes each way of the pair.
    let pair = &server.calls(Call::Socketpair)[0];
    let (a, b) = (pair.fd, pair.fd2.unwrap());
    assert!(pair.socket.is_some_and(|k| k.is_unix()));
    assert_eq!(server.bytes_on(a, Direction::Send, pair.time_ns), 4);
    assert_eq!(server.bytes_on(b, Direction::Recv, pair.time_ns), 4);
}

const UDP_SERVER: &str = r#"
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('127.0.0.1', 0))
print('port', s.getsockname()[1], flush=True)
for _ in range(5):
    data, addr = s.recvfrom(2048)
    s.sendto(data[::-1], addr)
"#;

const UDP_CLIENT: &str = r#"
import socket, sys
port = int(sys.argv[1])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(20)
for i in range(3):
    s.sendto(b'datagram %d' % i, ('127.0.0.1', port))
    print(s.recvfrom(2048)[0].decode())
# A connected socket: send and recv name no address; the library learns the sender anyway.
c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
c.settimeout(20)
c.connect(('127.0.0.1', port))
for i in range(3, 5):
    c.send(b'datagram %d' % i)
    print(c.recv(2048).decode())
# errno survives the library: a refused TCP connection is still refused.
t = socket.socket()
try:
    t.connect(('127.0.0.1', 9))
except ConnectionRefusedError:
    print('refused')
"#;

#[test]
fn udp_exchange() {
    let cap = Capture::new();
    let mut server = cap.cmd(python());
    server.args(["-u", "-c", UDP_SERVER]);
    let (server, port, _stdout) = start_server(server);
    let mut client = cap.cmd(python());
    client.args(["-c", UDP_CLIENT, &port.to_string()]);
    let out = run(client);
    let expected: String = (0..5)
        .map(|i| {
            format!(
                "{}\n",
                format!("datagram {i}").chars().rev().collect::<String>()
            )
        })
        .collect::<String>()
        + "refused\n";
    assert_eq!(String::from_utf8(out.stdout).unwrap(), expected);
    let out = wait(server);
    assert!(out.status.success());

    let logs = cap.logs();
    let server = find(&logs, "server", |l| {
        l.header
            .argv
            .iter()
            .any(|a| a.contains("recvfrom(2048)") && a.contains("bind"))
    });
    let client = find(&logs, "client", |l| {
        l.header.argv.iter().any(|a| a.contains("refused"))
    });
    let server_ep = inet(&format!("127.0.0.1:{port}"));
    let sends: Vec<&Record> = client
        .records
        .iter()
        .filter(|r| r.syscall.direction() == Some(Direction::Send) && r.hash.is_some())
        .collect();
    let recvs: Vec<&Record> = server
        .records
        .iter()
        .filter(|r| r.syscall.direction() == Some(Direction::Recv))
        .collect();
    assert_eq!((sends.len(), recvs.len()), (5, 5));
    for (i, (s, r)) in sends.iter().zip(&recvs).enumerate() {
        let payload = format!("datagram {i}");
        let h = payload_hash(payload.as_bytes());
        assert_eq!(s.hash, Some(h), "client datagram {i}");
        assert_eq!(r.hash, Some(h), "server datagram {i}");
        assert_eq!(s.ret, payload.len() as i64);
        assert_eq!(r.ret, payload.len() as i64);
        // The server saw the client's address; for the first send of each socket the client
        // logged its (implicitly bound) local name.
        let Some(Endpoint::Inet(from)) = &r.peer else {
            panic!("no sender: {r:?}")
        };
        assert_eq!(from.ip().to_string(), "127.0.0.1");
        if i == 0 {
            let Some(Endpoint::Inet(local)) = &s.local else {
                panic!("no local name on the first send: {s:?}")
            };
            assert_eq!(local.port(), from.port());
        }
        if i == 3 {
            // The connected socket's local name is on its connect record.
            let c = client
                .calls(Call::Connect)
                .into_iter()
                .find(|c| c.fd == s.fd)
                .unwrap();
            assert_eq!(c.peer, Some(server_ep.clone()));
            let Some(Endpoint::Inet(local)) = &c.local else {
                panic!("no local name on connect: {c:?}")
            };
            assert_eq!(local.port(), from.port());
            assert!(s.local.is_none());
        }
        if i < 3 {
            assert_eq!(s.peer, Some(server_ep.clone()));
        }
    }
    // Replies: server sendto with the reversed payload, client recv with its hash and sender.
    let replies: Vec<&Record> = client
        .records
        .iter()
        .filter(|r| r.syscall.direction() == Some(Direction::Recv))
        .collect();
    assert_eq!(replies.len(), 5);
    for (i, r) in replies.iter().enumerate() {
        let rev: String = format!("datagram {i}").chars().rev().collect();
        assert_eq!(r.hash, Some(payload_hash(rev.as_bytes())));
        assert_eq!(
            r.peer,
            Some(server_ep.clone()),
            "sender of reply {i}: {r:?}"
        );
    }
    assert_eq!(replies[3].syscall, Syscall::Recv);
    // The refused connect, with its errno.
    let refused = client
        .calls(Call::Connect)
        .into_iter()
        .find(|r| r.peer == Some(inet("127.0.0.1:9")))
        .unwrap();
    assert_eq!(
        (refused.ret, refused.errno),
        (-1, Some(libc::ECONNREFUSED as u16))
    );
}

const EXEC_CHAIN: &str = r#"
import os, socket, sys
a, b = socket.socketpair()
a.send(b'x')
b.recv(1)
if len(sys.argv) > 1:
    os.execv(sys.executable, [sys.executable, '-c', sys.argv[1]])
"#;

#[test]
fn exec_continues_the_process_log() {
    let cap = Capture::new();
    let mut cmd = cap.cmd(python());
    cmd.args([
        "-c",
        EXEC_CHAIN,
        "import socket; socket.socketpair(); print('second')",
    ]);
    let out = run(cmd);
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "second\n");
    let logs = cap.logs();
    assert_eq!(
        logs.len(),
        2,
        "{:?}",
        logs.iter().map(|l| &l.name).collect::<Vec<_>>()
    );
    let (first, second) = (&logs[0], &logs[1]);
    assert_eq!(first.header.pid, second.header.pid);
    assert_eq!((first.header.image, second.header.image), (0, 1));
    assert_eq!(second.header.origin, Origin::Exec);
    assert_eq!(second.header.previous.as_deref(), Some(first.name.as_str()));
    assert_eq!(first.header.start_ticks, second.header.start_ticks);
    assert!(!first.closed(), "an exec does not close the log");
    let last = first.records.last().unwrap();
    assert_eq!((last.syscall, last.ret), (Syscall::Execv, 0));
    assert!(
        last.path
            .as_ref()
            .is_some_and(|p| p.ends_with(b"python3") || p.windows(6).any(|w| w == b"python"))
    );
    // Everything before the exec was written out.
    assert!(
        first
            .records
            .iter()
            .any(|r| r.syscall == Syscall::Recv && r.ret == 1)
    );
    assert!(second.closed());
    assert_eq!(second.calls(Call::Socketpair).len(), 1);
}

#[test]
fn nothing_without_the_directory_variable() {
    let lib = preload_lib();
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(python());
    cmd.env("LD_PRELOAD", &lib)
        .env_remove("CAUSEWAY_CAPTURE_DIR")
        .current_dir(dir.path());
    cmd.args([
        "-c",
        "import socket; a, b = socket.socketpair(); a.send(b'x'); print(b.recv(1))",
    ]);
    let out = run(cmd);
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "b'x'\n");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

const SLOW_SENDER: &str = r#"
import socket, time
a, b = socket.socketpair()
for i in range(5):
    a.send(b'tick %d' % i)
    b.recv(10)
    time.sleep(0.15)
"#;

#[test]
fn follow_a_live_log() {
    // The reader follows the log while the process runs: records arrive within the
    // library's flush age, and the end-of-log record ends the iteration.
    let cap = Capture::new();
    let mut cmd = cap.cmd(python());
    cmd.args(["-c", SLOW_SENDER]);
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let start = Instant::now();
    let path = loop {
        let found = read_dir(cap.path())
            .unwrap()
            .into_iter()
            .find(|f| f.name.pid == pid);
        if let Some(f) = found {
            break f.path;
        }
        assert!(start.elapsed() < LIMIT, "no log appeared");
        std::thread::sleep(Duration::from_millis(5));
    };
    let follow = causeway_capture::Follow {
        poll: Duration::from_millis(5),
        idle_timeout: Some(Duration::from_secs(20)),
        ..Default::default()
    };
    let mut arrivals = Vec::new();
    for r in causeway_capture::open_following(&path, follow).unwrap() {
        let r = r.unwrap();
        arrivals.push((r.syscall, r.time_ns, start.elapsed()));
    }
    let out = wait(child);
    assert!(out.status.success());
    assert_eq!(arrivals.last().map(|a| a.0), Some(Syscall::End));
    let sends: Vec<_> = arrivals.iter().filter(|a| a.0 == Syscall::Send).collect();
    assert_eq!(sends.len(), 5);
    // The first sends were read while the process still ran (it sleeps 0.6 s after them).
    let end_seen = arrivals.last().unwrap().2;
    assert!(
        sends[1].2 + Duration::from_millis(300) < end_seen,
        "{arrivals:?}"
    );
}

const FD_HOSTILE: &str = r#"
import os, socket
def target(f):
    try:
        return os.readlink('/proc/self/fd/' + f)
    except OSError:
        return ''
log = [int(f) for f in os.listdir('/proc/self/fd') if target(f).endswith('.cwlog')][0]
a, b = socket.socketpair()
a.send(b'one')
b.recv(10)
try:
    os.close(log)
    print('closed')
except OSError as e:
    print('close', e.errno)
# The objects must not close the numbers again once they are reused below.
a.detach()
b.detach()
os.closerange(3, 1 << 16)
a, b = socket.socketpair()
a.send(b'two')
b.recv(10)
r, w = os.pipe()
os.dup2(r, log)
print('dup2 ok', os.read(log, 0) == b'')
a.send(b'three')
b.recv(10)
"#;

#[test]
fn the_log_descriptor_is_out_of_the_programs_way() {
    // Closing it fails as for any unused number, closing every descriptor spares it, and a
    // dup2 onto its number succeeds and moves the log elsewhere.
    let cap = Capture::new();
    let mut cmd = cap.cmd(python());
    cmd.args(["-c", FD_HOSTILE]);
    let out = run(cmd);
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("close {}\ndup2 ok True\n", libc::EBADF)
    );
    let logs = cap.logs();
    assert_eq!(logs.len(), 1);
    let log = &logs[0];
    assert!(log.closed());
    let sent: Vec<i64> = log
        .records
        .iter()
        .filter(|r| r.syscall == Syscall::Send)
        .map(|r| r.ret)
        .collect();
    assert_eq!(sent, [3, 3, 5]);
    // The pair closed by closerange is logged as closed.
    assert!(
        log.records
            .iter()
            .any(|r| r.syscall.call() == Call::Close && r.fd == 3)
    );
}
