//! `kubectl-mcsched __complete WORD... PARTIAL`: completions in cobra's `__complete` protocol,
//! which kubectl (1.26 and later) relays for `kubectl mcsched <TAB>` when a
//! `kubectl_complete-mcsched` executable is on the PATH. kubectl calls that executable with
//! the words after `mcsched`, the last one being the word to complete (empty when none is
//! typed yet), and reads one completion a line (`value<TAB>description`) and last
//! `:DIRECTIVE`.

use clap::Command;

/// Cobra's `ShellCompDirective` values used here.
const DEFAULT: u32 = 0;
const NO_FILE_COMP: u32 = 4;

/// The completions of the last of `words` after the others, and cobra's directive line.
pub fn complete(cli: Command, words: &[String]) -> String {
    let mut cli = cli;
    // Global flags reach the subcommands only once clap has built the tree.
    cli.build();
    let (partial, typed) = match words.split_last() {
        Some((last, rest)) => (last.as_str(), rest),
        None => ("", &[][..]),
    };
    let mut cmd = &cli;
    let mut value_of: Option<&clap::Arg> = None;
    for word in typed {
        if value_of.take().is_some() {
            continue;
        }
        if word == "--" {
            break;
        }
        if let Some(flag) = word.strip_prefix("--") {
            if !flag.contains('=') {
                value_of = find_long(cmd, flag).filter(|a| takes_value(a));
            }
        } else if let Some(shorts) = word.strip_prefix('-').filter(|s| !s.is_empty()) {
            // `-n` takes the next word; `-nshop` has its value already.
            if shorts.chars().count() == 1 {
                value_of = shorts
                    .chars()
                    .next()
                    .and_then(|c| cmd.get_arguments().find(|a| a.get_short() == Some(c)))
                    .filter(|a| takes_value(a));
            }
        } else if let Some(sub) = cmd.find_subcommand(word) {
            cmd = sub;
        }
    }
    let mut out = Vec::new();
    let directive = if let Some(arg) = value_of {
        let values = arg.get_possible_values();
        if values.is_empty() {
            // A path (--kubeconfig, -f) or a name the cluster knows: the shell's files
            // for paths, nothing for the rest.
            if is_path(arg) { DEFAULT } else { NO_FILE_COMP }
        } else {
            for v in values.iter().filter(|v| !v.is_hide_set()) {
                out.push(line(v.get_name(), v.get_help().map(|h| h.to_string())));
            }
            NO_FILE_COMP
        }
    } else if partial.starts_with('-') {
        for a in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
            let help = a.get_help().map(|h| h.to_string());
            if let Some(long) = a.get_long() {
                out.push(line(&format!("--{long}"), help.clone()));
            }
            if let Some(short) = a.get_short() {
                out.push(line(&format!("-{short}"), help));
            }
        }
        NO_FILE_COMP
    } else {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            out.push(line(sub.get_name(), sub.get_about().map(|h| h.to_string())));
        }
        for positional in cmd.get_positionals() {
            for v in positional.get_possible_values() {
                out.push(line(v.get_name(), v.get_help().map(|h| h.to_string())));
            }
        }
        NO_FILE_COMP
    };
    let mut text: String = out
        .into_iter()
        .filter(|(value, _)| value.starts_with(partial))
        .map(|(value, help)| match help {
            Some(h) => format!("{value}\t{h}\n"),
            None => format!("{value}\n"),
        })
        .collect();
    text.push_str(&format!(":{directive}\n"));
    text
}

fn line(value: &str, help: Option<String>) -> (String, Option<String>) {
    // Cobra's shells show the description's first line only.
    let help = help.and_then(|h| h.lines().next().map(str::to_string));
    (value.to_string(), help)
}

fn find_long<'a>(cmd: &'a Command, flag: &str) -> Option<&'a clap::Arg> {
    cmd.get_arguments().find(|a| {
        a.get_long() == Some(flag)
            || a.get_all_aliases()
                .is_some_and(|aliases| aliases.contains(&flag))
    })
}

fn takes_value(a: &clap::Arg) -> bool {
    a.get_num_args().is_some_and(|n| n.min_values() > 0)
        && !matches!(
            a.get_action(),
            clap::ArgAction::SetTrue | clap::ArgAction::SetFalse | clap::ArgAction::Count
        )
}

fn is_path(a: &clap::Arg) -> bool {
    matches!(
        a.get_value_hint(),
        clap::ValueHint::FilePath | clap::ValueHint::AnyPath | clap::ValueHint::DirPath
    ) || a
        .get_value_names()
        .is_some_and(|names| names.iter().any(|n| n.as_str() == "FILE"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(words: &[&str]) -> Vec<String> {
        use clap::CommandFactory;
        let words: Vec<String> = words.iter().map(|w| w.to_string()).collect();
        complete(crate::Cli::command(), &words)
            .lines()
            .map(|l| l.split('\t').next().unwrap_or_default().to_string())
            .collect()
    }

    #[test]
    fn subcommands_flags_and_values() {
        let top = lines(&[""]);
        for want in ["join", "explain", "get", "install", "version", ":4"] {
            assert!(top.contains(&want.to_string()), "{want}: {top:?}");
        }
        assert!(!top.iter().any(|l| l.starts_with("__")), "{top:?}");
        assert_eq!(lines(&["g"]), ["get", ":4"]);
        assert_eq!(lines(&["get", ""]), ["clusters", "policies", "help", ":4"]);
        assert_eq!(
            lines(&["-n", "shop", "explain", "p"]),
            ["pod", "podgroup", ":4"],
            "a flag's value is no subcommand"
        );
        let flags = lines(&["get", "policies", "--"]);
        for want in [
            "--all-namespaces",
            "--output",
            "--no-headers",
            "--as",
            "--kubeconfig",
        ] {
            assert!(flags.contains(&want.to_string()), "{want}: {flags:?}");
        }
        assert_eq!(lines(&["completion", "f"]), ["fish", ":4"]);
        assert_eq!(lines(&["--kubeconfig", ""]), [":0"], "files for a path");
        assert_eq!(lines(&["--context", ""]), [":4"]);
    }
}
