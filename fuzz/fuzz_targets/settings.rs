//! The text a user hands over besides captures and traces; nothing may panic. The first byte
//! picks the parser, the rest is its text: a `--config` settings file (TOML) expanded to
//! arguments and those parsed as the command line; a `--names` file; an `--alert` rule; a
//! duration, size or `--speed` value.
#![no_main]

use causeway::cli::{Cli, parse_duration, parse_size, parse_speed};
use causeway::settings::settings_from_text;
use causeway_operators::{AlertRule, Names};
use clap::Parser;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    match which % 4 {
        0 => {
            for sub in ["analyze", "tcp", "stats"] {
                if let Ok(args) = settings_from_text(&text, &"fuzz.toml", sub) {
                    let mut argv = vec!["causeway".into(), sub.into()];
                    argv.extend(args);
                    let _ = Cli::try_parse_from(argv);
                }
            }
        }
        1 => {
            let _ = Names::parse(&text, "fuzz-names.txt");
        }
        2 => {
            let _ = text.parse::<AlertRule>();
        }
        _ => {
            let _ = parse_duration(&text);
            let _ = parse_size(&text);
            let _ = parse_speed(&text);
        }
    }
});
