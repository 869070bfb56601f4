//! The example runs Causeway with its sink: every alert of the run is in its log, once.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::Command;

#[test]
fn the_custom_sink_logs_every_alert() {
    let bin = env!("CARGO_BIN_EXE_alert-log");
    let dir = std::env::temp_dir().join(format!("alert-log-{}", std::process::id()));
    let status = Command::new(bin)
        .args([
            "generate",
            "--preset",
            "multi-tier",
            "--format",
            "csv",
            "--messages",
            "5000",
            "-o",
        ])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(status.success());
    let log = dir.join("alerts.log");
    let out = Command::new(bin)
        .env("ALERT_LOG", &log)
        .args([
            "analyze",
            "--emit",
            "stats",
            "--format",
            "jsonl",
            "--alert",
            "pattern.p99 > 20ms",
        ])
        .arg(dir.join("messages.csv"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let alerts: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["kind"] == "alert")
        .map(|v| {
            format!(
                "{} {} {}",
                v["time_ns"],
                v["severity"].as_str().unwrap(),
                v["message"].as_str().unwrap()
            )
        })
        .collect();
    let logged: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert!(!alerts.is_empty());
    assert_eq!(logged, alerts);
    std::fs::remove_dir_all(dir).ok();
}
