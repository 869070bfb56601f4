//! Captures written by real tools parse with the packet counts and time spans capinfos reports.
//!
//! Each test makes its capture itself: traffic on loopback, or between two network namespaces
//! it creates (veth, Ethernet), captured by tcpdump, dumpcap or tshark.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::net::{TcpListener, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;

/// Captures are made one at a time, with a 16 MiB kernel buffer (`-B`): on a small machine the
/// default buffer and parallel captures make the capture tools themselves drop packets, which
/// is not what these tests are about.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `causeway stats` on `path` and checks it against capinfos; returns the stats record.
fn agrees_with_capinfos(path: &Path, origin: &str) -> serde_json::Value {
    let (count, first, last) = capinfos(path);
    let records = causeway_jsonl(&["stats", "--format", "jsonl", &path.display().to_string()]);
    let st = stats_of(&records, origin).clone();
    assert_eq!(
        st["records"].as_u64(),
        Some(count),
        "packet count of {} ({st})",
        path.display()
    );
    assert!(count > 0, "the capture of {} is empty", path.display());
    assert_eq!(
        st["first_ns"].as_u64(),
        first,
        "first packet time of {}",
        path.display()
    );
    assert_eq!(
        st["last_ns"].as_u64(),
        last,
        "last packet time of {}",
        path.display()
    );
    let damaged: u64 = [
        "corrupt_record",
        "truncated_record",
        "malformed_header",
        "unknown_interface",
    ]
    .iter()
    .filter_map(|k| st["skipped"][k].as_u64())
    .sum();
    assert_eq!(damaged, 0, "a clean capture reported damage: {st}");
    st
}

/// Captures loopback traffic with `program args` (which must write to `file`) while sending
/// bounded TCP and UDP traffic on the ports it was told to filter.
fn capture_loopback(
    program: &str,
    args: &[&str],
    file: &Path,
    listener: TcpListener,
    udp: UdpSocket,
) {
    let sniffer = Sniffer::start(program, args);
    loopback_traffic(listener, udp, 20);
    sniffer.stop();
    assert!(file.exists(), "{program} wrote no file");
}

fn ports() -> (TcpListener, UdpSocket, String) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let filter = format!(
        "host 127.0.0.1 and (tcp port {} or udp port {})",
        listener.local_addr().unwrap().port(),
        udp.local_addr().unwrap().port()
    );
    (listener, udp, filter)
}

#[test]
fn tcpdump_any_writes_sll2_and_sll() {
    let _serial = serial();
    if !system_tools(&["tcpdump", "capinfos"]) {
        return;
    }
    let dir = scratch("any");
    for (linktype, name) in [
        ("LINUX_SLL2", "Linux cooked v2 (SLL2)"),
        ("LINUX_SLL", "Linux cooked v1 (SLL)"),
    ] {
        let file = dir.join(format!("any-{linktype}.pcap"));
        let f = file.display().to_string();
        // On a loaded machine, `tcpdump -i any` now and then misses the first or last
        // packets of the short exchange (its ring is attached to every interface in turn);
        // what is tested here is reading what it wrote, so a capture that missed a protocol
        // is made again (at most three times).
        let mut st = serde_json::Value::Null;
        for _ in 0..3 {
            let (listener, udp, filter) = ports();
            capture_loopback(
                "tcpdump",
                &[
                    "-i",
                    "any",
                    "-y",
                    linktype,
                    "--immediate-mode",
                    "-B",
                    "16384",
                    "-U",
                    "-w",
                    &f,
                    &filter,
                ],
                &file,
                listener,
                udp,
            );
            st = agrees_with_capinfos(&file, &format!("any-{linktype}"));
            if st["tcp"].as_u64().unwrap_or(0) > 0 && st["udp"].as_u64().unwrap_or(0) > 0 {
                break;
            }
        }
        assert!(st["linktypes"][name].as_u64().unwrap_or(0) > 0, "{st}");
        assert!(
            st["tcp"].as_u64().unwrap() > 0 && st["udp"].as_u64().unwrap() > 0,
            "{st}"
        );
    }
}

#[test]
fn tcpdump_nanosecond_pcap_keeps_nanoseconds() {
    let _serial = serial();
    if !system_tools(&["tcpdump", "capinfos"]) {
        return;
    }
    let dir = scratch("nano");
    let file = dir.join("lo-nano.pcap");
    let (listener, udp, filter) = ports();
    let f = file.display().to_string();
    capture_loopback(
        "tcpdump",
        &[
            "-i",
            "lo",
            "--time-stamp-precision=nano",
            "--immediate-mode",
            "-B",
            "16384",
            "-U",
            "-w",
            &f,
            &filter,
        ],
        &file,
        listener,
        udp,
    );
    let st = agrees_with_capinfos(&file, "lo-nano");
    assert_eq!(st["formats"]["pcap (ns)"], 1, "{st}");
    // capinfos' nanosecond times match ours to the nanosecond (checked above); make sure the
    // capture really carries sub-microsecond digits somewhere.
    let out = Command::new("tshark")
        .args(["-r", &f, "-T", "fields", "-e", "frame.time_epoch"])
        .output();
    if let Ok(out) = out {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.lines().any(|l| !l.ends_with("000")),
            "no sub-µs timestamps in {f}"
        );
    }
}

#[test]
fn gzip_compressed_capture() {
    let _serial = serial();
    if !system_tools(&["tcpdump", "capinfos", "gzip"]) {
        return;
    }
    let dir = scratch("gzip");
    let file = dir.join("lo-gz.pcap");
    let (listener, udp, filter) = ports();
    let f = file.display().to_string();
    capture_loopback(
        "tcpdump",
        &[
            "-i",
            "lo",
            "--immediate-mode",
            "-B",
            "16384",
            "-U",
            "-w",
            &f,
            &filter,
        ],
        &file,
        listener,
        udp,
    );
    let plain = agrees_with_capinfos(&file, "lo-gz");
    let status = Command::new("gzip").arg("-k").arg(&file).status().unwrap();
    assert!(status.success());
    let gz = dir.join("lo-gz.pcap.gz");
    let compressed = agrees_with_capinfos(&gz, "lo-gz");
    assert_eq!(plain["records"], compressed["records"]);
    assert_eq!(plain["bytes"], compressed["bytes"]);
    // and through stdin
    let out = Command::new(bin())
        .args(["stats", "--format", "jsonl", "-"])
        .stdin(std::fs::File::open(&gz).unwrap())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let st: serde_json::Value = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|r| r["kind"] == "stats")
        .unwrap();
    assert_eq!(st["origin"], "stdin");
    assert_eq!(st["records"], plain["records"]);
}

#[test]
fn dumpcap_pcapng_with_two_interfaces_and_sections() {
    let _serial = serial();
    if !system_tools(&["dumpcap", "capinfos"]) {
        return;
    }
    let dir = scratch("pcapng");
    let file = dir.join("two-if.pcapng");
    let (listener, udp, filter) = ports();
    let f = file.display().to_string();
    capture_loopback(
        "dumpcap",
        &[
            "-q", "-B", "16", "-i", "lo", "-i", "any", "-f", &filter, "-w", &f,
        ],
        &file,
        listener,
        udp,
    );
    let st = agrees_with_capinfos(&file, "two-if");
    assert_eq!(st["formats"]["pcapng"], 1, "{st}");
    assert_eq!(
        st["linktypes"].as_object().unwrap().len(),
        2,
        "two interfaces, two link types: {st}"
    );
    // Two files concatenated: a pcapng with two sections.
    let twice = dir.join("two-sections.pcapng");
    let mut bytes = std::fs::read(&file).unwrap();
    bytes.extend(std::fs::read(&file).unwrap());
    std::fs::write(&twice, bytes).unwrap();
    let st2 = agrees_with_capinfos(&twice, "two-sections");
    assert_eq!(
        st2["records"].as_u64().unwrap(),
        2 * st["records"].as_u64().unwrap()
    );
}

#[test]
fn tshark_pcapng() {
    let _serial = serial();
    if !system_tools(&["tshark", "capinfos"]) {
        return;
    }
    let dir = scratch("tshark");
    let file = dir.join("tshark-lo.pcapng");
    let (listener, udp, filter) = ports();
    let f = file.display().to_string();
    capture_loopback(
        "tshark",
        &[
            "-q", "-B", "16", "-i", "lo", "-f", &filter, "-F", "pcapng", "-w", &f,
        ],
        &file,
        listener,
        udp,
    );
    agrees_with_capinfos(&file, "tshark-lo");
}

#[test]
fn tcpdump_on_ethernet_veth_in_network_namespaces() {
    let _serial = serial();
    if !system_tools(&["tcpdump", "capinfos", "ip", "python3"]) {
        return;
    }
    let dir = scratch("veth");
    let file = dir.join("veth.pcap");
    let net = NetnsPair::new("cap", 213);
    let server = format!(
        "import socket\n\
         s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         s.bind(('{ip}', 8080)); s.listen(1); s.settimeout(10)\n\
         c,_=s.accept(); c.settimeout(5)\n\
         for i in range(30):\n    d=c.recv(4096)\n    if not d: break\n    c.sendall(b'x'*2000)\n\
         u=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(('{ip}', 5353)); u.settimeout(3)\n\
         for i in range(30):\n    try: u.recvfrom(2048)\n    except Exception: break\n",
        ip = net.ip_b
    );
    let client = format!(
        "import socket, time\n\
         for i in range(50):\n    \
             try:\n        c=socket.create_connection(('{ip}', 8080), timeout=1); break\n    \
             except OSError: time.sleep(0.1)\n\
         c.settimeout(5)\n\
         for i in range(30):\n    c.sendall(b'request %d' % i); n=0\n    \
             while n < 2000:\n        d=c.recv(4096)\n        if not d: break\n        n+=len(d)\n\
         c.close()\n\
         u=socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
         for i in range(30): u.sendto(b'q'*i, ('{ip}', 5353))\n",
        ip = net.ip_b
    );
    let mut srv = NetnsPair::exec(&net.b, "python3")
        .args(["-c", &server])
        .spawn()
        .unwrap();
    let f = file.display().to_string();
    let sniffer = Sniffer::start(
        "ip",
        &[
            "netns",
            "exec",
            &net.a,
            "tcpdump",
            "-i",
            &net.veth_a,
            "--immediate-mode",
            "-B",
            "16384",
            "-U",
            "-w",
            &f,
        ],
    );
    let status = NetnsPair::exec(&net.a, "python3")
        .args(["-c", &client])
        .status()
        .unwrap();
    assert!(status.success(), "client failed");
    let _ = srv.wait();
    sniffer.stop();
    let st = agrees_with_capinfos(&file, "veth");
    assert!(st["linktypes"]["Ethernet"].as_u64().unwrap() > 0, "{st}");
    assert!(st["tcp"].as_u64().unwrap() >= 60, "{st}");
    assert!(st["udp"].as_u64().unwrap() >= 25, "{st}");
    // The conversation shows up as one TCP flow to 8080, opened and closed in the capture.
    let records = causeway_jsonl(&["analyze", "--format", "jsonl", "--emit", "flows", &f]);
    let web: Vec<_> = records
        .iter()
        .filter(|r| r["kind"] == "flow" && r["dst_endpoint"] == format!("{}:8080", net.ip_b))
        .collect();
    assert_eq!(web.len(), 1, "{records:?}");
    assert_eq!(web[0]["saw_open"], true);
    assert_eq!(web[0]["end"], "closed");
    assert_eq!(web[0]["to_client"]["payload_bytes"], 30 * 2000);
}
