//! `causeway capture`: runs a command with the preload library that logs its socket calls.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};

use crate::cli::CaptureArgs;

/// The preload library's file name.
pub const PRELOAD_NAME: &str = "libcauseway_preload.so";

/// Where the preload library is: `--preload`, else next to this binary, else
/// `$CAUSEWAY_PRELOAD`.
pub fn find_preload(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        if !p.is_file() {
            bail!("--preload {}: no such file", p.display());
        }
        return Ok(p.to_owned());
    }
    let exe = std::env::current_exe().context("cannot find this binary's path")?;
    if let Some(dir) = exe.parent() {
        // Next to the binary; for test binaries in target/*/deps, one level up.
        for d in [dir, dir.parent().unwrap_or(dir)] {
            let p = d.join(PRELOAD_NAME);
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    if let Some(p) = std::env::var_os("CAUSEWAY_PRELOAD") {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
    }
    bail!(
        "{PRELOAD_NAME} not found next to {} (build it with `cargo build --release -p \
         causeway-preload`, or give --preload FILE)",
        exe.display()
    )
}

/// Runs the command under the preload library; returns its exit status as ours.
pub fn run(args: &CaptureArgs) -> Result<ExitCode> {
    let preload = find_preload(args.preload.as_deref())?;
    let preload = preload
        .canonicalize()
        .with_context(|| preload.display().to_string())?;
    std::fs::create_dir_all(&args.output)
        .with_context(|| format!("cannot create {}", args.output.display()))?;
    let dir = args
        .output
        .canonicalize()
        .with_context(|| args.output.display().to_string())?;
    let Some((program, rest)) = args.command.split_first() else {
        bail!("no command to run");
    };
    let mut ld_preload = OsString::from(&preload);
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        ld_preload.push(":");
        ld_preload.push(old);
    }
    let status = Command::new(program)
        .args(rest)
        .env("LD_PRELOAD", ld_preload)
        .env(causeway_capture::CAPTURE_DIR_ENV, &dir)
        .status()
        .with_context(|| format!("cannot run {program}"))?;
    // What processes that were killed had buffered (their spill files), into their logs.
    match causeway_capture::spill::drain_dir(&dir) {
        Ok((d, n)) if d.records > 0 || d.cut > 0 => tracing::info!(
            "recovered {} records of {n} processes that ended without writing them out",
            d.records
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot recover buffered records: {e}"),
    }
    tracing::info!("logs in {}", dir.display());
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => ExitCode::from(c.clamp(0, 255) as u8),
        (None, Some(sig)) => ExitCode::from((128 + sig).clamp(0, 255) as u8),
        (None, None) => ExitCode::FAILURE,
    })
}
