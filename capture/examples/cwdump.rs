//! Prints socket-call logs as text: the header, then one line per record.
//!
//! Run: `cargo run --release -p causeway-capture --example cwdump -- PATH...` where each PATH
//! is a log file or a capture directory (every log in it, in name order).

use std::path::PathBuf;
use std::process::ExitCode;

use causeway_capture::{LogError, Record, read_dir};

fn line(r: &Record) -> String {
    let mut s = format!(
        "{:>19} tid {:<7} {:<22} fd {:<4} ret {}",
        r.time_ns,
        r.tid,
        r.syscall.name(),
        r.fd,
        r.ret
    );
    if let Some(e) = r.errno {
        s += &format!(" errno {e}");
    }
    if let Some(e) = &r.local {
        s += &format!(" local {e}");
    }
    if let Some(e) = &r.peer {
        s += &format!(" peer {e}");
    }
    if let Some(k) = r.socket {
        s += &format!(" af {} type {} proto {}", k.family, k.sock_type, k.protocol);
    }
    if let Some(p) = r.peer_pid {
        s += &format!(" peer_pid {p}");
    }
    if let Some(h) = r.hash {
        s += &format!(" hash {h:016x}");
    }
    if let Some(fd) = r.fd2 {
        s += &format!(" fd2 {fd}");
    }
    if let Some(p) = &r.path {
        s += &format!(" path {}", String::from_utf8_lossy(p));
    }
    if let Some(a) = r.arg {
        s += &format!(" arg {a}");
    }
    if let Some(m) = r.msg_flags {
        s += &format!(" msg_flags {m:#x}");
    }
    if let Some(b) = r.batch {
        s += &format!(" batch {}/{}", b.index, b.count);
    }
    s
}

fn dump(path: &PathBuf) -> Result<(), LogError> {
    let reader = causeway_capture::open(path)?;
    let h = reader.header().clone();
    println!(
        "== {} ({:?}, pid {} ppid {} image {}, exe {}, argv {:?}, previous {:?})",
        path.display(),
        h.origin,
        h.pid,
        h.ppid,
        h.image,
        h.exe,
        h.argv,
        h.previous
    );
    for r in reader {
        match r {
            Ok(r) => println!("{}", line(&r)),
            Err(e) => println!("!! {e}"),
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let mut failed = false;
    for arg in std::env::args_os().skip(1) {
        let path = PathBuf::from(arg);
        let files = if path.is_dir() {
            match read_dir(&path) {
                Ok(f) => f.into_iter().map(|f| f.path).collect(),
                Err(e) => {
                    eprintln!("{e}");
                    failed = true;
                    continue;
                }
            }
        } else {
            vec![path]
        };
        for f in &files {
            if let Err(e) = dump(f) {
                eprintln!("{e}");
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
