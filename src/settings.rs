//! `--config FILE` for `analyze`, `tcp` and `stats`: settings in TOML, named as the long
//! options are.
//!
//! ```toml
//! # causeway.toml
//! inputs = ["web=web.pcap", "db=db.pcap"]   # the positional INPUTs
//! names = "hosts.txt"
//! emit = ["patterns", "stats"]
//! emit-every = "10s"
//! window = "5m"
//! alert = ["new-pattern", "critical: pattern.p99 > 200ms"]
//! sink = ["jsonl:/var/log/causeway/patterns.jsonl", "exec:./notify.sh"]
//! progress = "never"
//! ```
//!
//! Each key becomes `--key=value` (an array, one per element; `true` a bare `--key`; `false`
//! nothing), placed before the command line's own arguments: a value given on the command
//! line overrides the file's, and lists (`alert`, `sink`, `emit`, inputs) add up. Unknown keys
//! are an error naming the file, so a typo does not pass silently.

use std::ffi::OsString;
use std::path::Path;

use clap::CommandFactory;

use crate::cli::Cli;

/// Subcommands that take `--config`.
const WITH_SETTINGS: [&str; 3] = ["analyze", "tcp", "stats"];

/// `args` (the process's arguments) with a `--config FILE` of `analyze`, `tcp` or `stats`
/// replaced by the settings in FILE; other arguments are returned unchanged.
pub fn expand(args: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let Some(sub) = args
        .iter()
        .skip(1)
        .position(|a| !a.to_string_lossy().starts_with('-'))
        .map(|i| i + 1)
    else {
        return Ok(args);
    };
    let name = args[sub].to_string_lossy().into_owned();
    if !WITH_SETTINGS.contains(&name.as_str()) {
        return Ok(args);
    }
    let mut file = None;
    let mut rest = Vec::new();
    let mut iter = args[sub + 1..].iter().cloned();
    while let Some(a) = iter.next() {
        let text = a.to_string_lossy();
        if text == "--" {
            rest.push(a);
            rest.extend(iter.by_ref());
            break;
        }
        if text == "--config" {
            file = Some(
                iter.next()
                    .ok_or("--config needs a FILE (settings in TOML)")?,
            );
        } else if let Some(f) = text.strip_prefix("--config=") {
            file = Some(OsString::from(f));
        } else {
            rest.push(a);
        }
    }
    let Some(file) = file else {
        return Ok(args);
    };
    let settings = settings_args(Path::new(&file), &name)?;
    let mut out: Vec<OsString> = args[..=sub].to_vec();
    out.extend(settings);
    out.extend(rest);
    Ok(out)
}

/// The arguments that the settings in `file` stand for, for subcommand `sub`.
fn settings_args(file: &Path, sub: &str) -> Result<Vec<OsString>, String> {
    let shown = file.display();
    let text = std::fs::read_to_string(file).map_err(|e| format!("{shown}: {e}"))?;
    settings_from_text(&text, &shown, sub)
}

/// The arguments that settings `text` (from the file `shown`) stand for, for subcommand
/// `sub`; errors name `shown`.
pub fn settings_from_text(
    text: &str,
    shown: &impl std::fmt::Display,
    sub: &str,
) -> Result<Vec<OsString>, String> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        let at = e
            .span()
            .map(|s| {
                let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
                format!(" (line {line}, offset {})", s.start)
            })
            .unwrap_or_default();
        format!("{shown}{at}: {}", e.message())
    })?;
    let command = Cli::command();
    let Some(sc) = command.find_subcommand(sub) else {
        return Ok(Vec::new());
    };
    let known: Vec<String> = sc
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_owned))
        .collect();
    let mut flags = Vec::new();
    let mut inputs = Vec::new();
    for (key, value) in &table {
        if key == "inputs" {
            for v in as_list(value) {
                inputs.push(OsString::from(scalar(&shown, key, v)?));
            }
            continue;
        }
        if key == "config" || !known.iter().any(|k| k == key) {
            return Err(format!(
                "{shown}: unknown setting `{key}` (settings are the long options of \
                 `causeway {sub}`, e.g. emit-every = \"10s\", and `inputs`)"
            ));
        }
        for v in as_list(value) {
            match v {
                toml::Value::Boolean(true) => flags.push(OsString::from(format!("--{key}"))),
                toml::Value::Boolean(false) => {}
                v => flags.push(OsString::from(format!(
                    "--{key}={}",
                    scalar(&shown, key, v)?
                ))),
            }
        }
    }
    flags.extend(inputs);
    Ok(flags)
}

fn as_list(value: &toml::Value) -> Vec<&toml::Value> {
    match value {
        toml::Value::Array(items) => items.iter().collect(),
        v => vec![v],
    }
}

fn scalar(file: &impl std::fmt::Display, key: &str, v: &toml::Value) -> Result<String, String> {
    match v {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(i) => Ok(i.to_string()),
        toml::Value::Float(f) => Ok(f.to_string()),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        _ => Err(format!(
            "{file}: setting `{key}`: expected a string, number, boolean or a list of them"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    fn with_file(text: &str, f: impl FnOnce(&str)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, text).unwrap();
        f(path.to_str().unwrap());
    }

    #[test]
    fn settings_become_arguments_before_the_command_line() {
        with_file(
            "inputs = [\"a.pcap\"]\nemit-every = \"10s\"\nalert = [\"new-pattern\", \"pattern.p99 > 2s\"]\nworkers = 2\ncount = 5\n",
            |path| {
                let got = expand(os(&[
                    "causeway",
                    "-v",
                    "analyze",
                    "--config",
                    path,
                    "--workers",
                    "1",
                    "b.pcap",
                ]))
                .unwrap();
                let got: Vec<String> = got.iter().map(|a| a.to_string_lossy().into()).collect();
                assert_eq!(
                    got,
                    [
                        "causeway",
                        "-v",
                        "analyze",
                        "--alert=new-pattern",
                        "--alert=pattern.p99 > 2s",
                        "--count=5",
                        "--emit-every=10s",
                        "--workers=2",
                        "a.pcap",
                        "--workers",
                        "1",
                        "b.pcap"
                    ]
                );
                use clap::Parser;
                let cli = Cli::try_parse_from(&got).unwrap();
                let crate::cli::Command::Analyze(a) = cli.command else {
                    panic!()
                };
                // The command line wins; lists add up.
                assert_eq!(a.engine.workers, 1);
                assert_eq!(a.inputs, ["a.pcap", "b.pcap"]);
                assert_eq!(a.alert.len(), 2);
            },
        );
    }

    #[test]
    fn mistakes_name_the_file() {
        with_file("emit-evry = \"10s\"\n", |path| {
            let e = expand(os(&["causeway", "analyze", "--config", path])).unwrap_err();
            assert!(
                e.contains(path) && e.contains("unknown setting `emit-evry`"),
                "{e}"
            );
        });
        with_file("window = \n", |path| {
            let e = expand(os(&["causeway", "analyze", "--config", path])).unwrap_err();
            assert!(e.starts_with(path) && e.contains("line 1"), "{e}");
        });
        let e = expand(os(&[
            "causeway",
            "analyze",
            "--config",
            "/nonexistent.toml",
        ]))
        .unwrap_err();
        assert!(e.starts_with("/nonexistent.toml:"), "{e}");
    }

    #[test]
    fn other_commands_are_untouched() {
        let args = os(&["causeway", "generate", "--config", "system.toml"]);
        assert_eq!(expand(args.clone()).unwrap(), args);
    }
}
