//! Helpers shared by the harnesses in benches/: running a command in a fresh helper process
//! to take its wall time and peak RSS, warming the page cache, finding tools.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Runs in a fresh helper process: spawns the command, waits, prints wall ns and the child's
/// peak RSS in KiB.
pub fn measure_child(cmd: &[String]) {
    let start = Instant::now();
    let status = Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    let wall = start.elapsed().as_nanos();
    assert!(status.success(), "{cmd:?} failed");
    let usage =
        nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).unwrap();
    println!("{wall} {}", usage.max_rss());
}

/// Runs `cmd` through [`measure_child`] in a fresh copy of this harness: (wall s, peak RSS
/// KiB).
pub fn measure(cmd: &[String]) -> (f64, u64) {
    let out = Command::new(std::env::current_exe().unwrap())
        .arg("--measure")
        .args(cmd)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut it = text.split_whitespace();
    let wall: f64 = it.next().unwrap().parse::<u128>().unwrap() as f64 / 1e9;
    let rss: u64 = it.next().unwrap().parse().unwrap();
    (wall, rss)
}

/// Reads `file` once so that it is in the page cache.
pub fn warm(file: &Path) {
    let mut f = std::fs::File::open(file).unwrap();
    std::io::copy(&mut f, &mut std::io::sink()).unwrap();
}

/// A tool on PATH (or in /usr/bin, /usr/sbin).
pub fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(tool))
                .find(|f| f.is_file())
        })
        .or_else(|| {
            [
                PathBuf::from("/usr/bin").join(tool),
                PathBuf::from("/usr/sbin").join(tool),
            ]
            .into_iter()
            .find(|f| f.is_file())
        })
}

/// The value after `--name` on the command line, parsed; `None` when absent.
pub fn flag<T: std::str::FromStr>(args: &[String], name: &str) -> Option<T> {
    let i = args.iter().position(|a| a == name)?;
    let value = args
        .get(i + 1)
        .unwrap_or_else(|| panic!("{name} needs a value"));
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name}: cannot parse {value:?}")),
    )
}

/// The comma-separated numbers after `--name`; `None` when absent.
pub fn list_flag(args: &[String], name: &str) -> Option<Vec<u64>> {
    flag::<String>(args, name).map(|v| {
        v.split(',')
            .map(|s| {
                s.parse()
                    .unwrap_or_else(|_| panic!("{name} N[,N...]: cannot parse {s:?}"))
            })
            .collect()
    })
}

/// Takes the arguments after `--analyze` out of `args`: they go to `causeway analyze` as they
/// are. `cargo bench` appends its own `--bench`, which is left out.
pub fn analyze_args(args: &mut Vec<String>) -> Vec<String> {
    match args.iter().position(|a| a == "--analyze") {
        Some(i) => args
            .split_off(i)
            .into_iter()
            .skip(1)
            .filter(|a| a != "--bench")
            .collect(),
        None => Vec::new(),
    }
}
