//! Helpers shared by the harnesses in benches/: running a command in a fresh helper process
//! to take its wall time and peak RSS, warming the page cache, finding tools.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// How often [`measure_child`] samples the child's resident set.
const RSS_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Runs in a fresh helper process: spawns the command, samples its resident set (VmRSS) every
/// [`RSS_EVERY`] while it runs, waits, and prints wall ns, the child's peak RSS in KiB and the
/// samples in KiB (comma-separated).
pub fn measure_child(cmd: &[String]) {
    let start = Instant::now();
    let mut child = Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let status_file = format!("/proc/{}/status", child.id());
    // The resident set is sampled on a thread of its own, so that the wall time is the
    // child's to the microsecond, not rounded up to the next sample.
    let done = std::sync::atomic::AtomicBool::new(false);
    let (status, wall, samples) = std::thread::scope(|scope| {
        let sampler = scope.spawn(|| {
            let mut samples = Vec::new();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let rss = std::fs::read_to_string(&status_file).ok().and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("VmRSS:"))
                        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                });
                samples.extend(rss.map(|kib| kib.to_string()));
                std::thread::sleep(RSS_EVERY);
            }
            samples
        });
        let status = child.wait().unwrap();
        let wall = start.elapsed().as_nanos();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        (status, wall, sampler.join().unwrap())
    });
    assert!(status.success(), "{cmd:?} failed");
    let usage =
        nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).unwrap();
    println!("{wall} {} {}", usage.max_rss(), samples.join(","));
}

/// Runs `cmd` through [`measure_child`] in a fresh copy of this harness: (wall s, peak RSS
/// KiB).
pub fn measure(cmd: &[String]) -> (f64, u64) {
    let (wall, rss, _) = measure_profile(cmd);
    (wall, rss)
}

/// [`measure`] `runs` times: the median wall time (s) and the largest peak RSS (KiB).
pub fn median_of(cmd: &[String], runs: usize) -> (f64, u64) {
    let mut samples: Vec<(f64, u64)> = (0..runs.max(1)).map(|_| measure(cmd)).collect();
    samples.sort_by(|a, b| a.0.total_cmp(&b.0));
    let rss = samples.iter().map(|s| s.1).max().unwrap_or(0);
    (samples[samples.len() / 2].0, rss)
}

/// tcpdump, for the harnesses that read their captures beside it; `None` (said once on
/// stderr) if it is not installed.
pub fn tcpdump() -> Option<PathBuf> {
    let found = which("tcpdump");
    if found.is_none() {
        eprintln!("tcpdump not found: reporting causeway alone");
    }
    found
}

/// Where the harnesses keep what they generate (`target/bench-data/`), created.
pub fn bench_data() -> PathBuf {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    std::fs::create_dir_all(&data).unwrap();
    data
}

/// [`measure`], and the resident set sampled every [`RSS_EVERY`] while it ran (KiB).
pub fn measure_profile(cmd: &[String]) -> (f64, u64, Vec<u64>) {
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
    let samples = it
        .next()
        .map(|s| s.split(',').map(|k| k.parse().unwrap()).collect())
        .unwrap_or_default();
    (wall, rss, samples)
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
