//! The agent binary with `--logging-format=json`: every line it writes on stderr, from
//! start to exit, is one JSON object with component-base's keys.

use std::process::Command;

/// A kubeconfig whose API server refuses connections (port 1 on loopback): the agent
/// logs its client's attempts and exits on the error.
fn unreachable_kubeconfig(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\n\
         clusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n\
         users: [{name: u, user: {token: t}}]\n\
         contexts: [{name: c, context: {cluster: c, user: u}}]\n\
         current-context: c\n",
    )
    .expect("kubeconfig written");
    path
}

/// Runs the agent with `args` (RUST_LOG unset: the flags decide) and returns its stderr
/// lines, each parsed.
fn json_lines(args: &[&str]) -> Vec<serde_json::Map<String, serde_json::Value>> {
    let out = Command::new(env!("CARGO_BIN_EXE_mcsched-agent"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("the agent runs");
    assert!(!out.status.success(), "it cannot reach its API server");
    let stderr = String::from_utf8(out.stderr).expect("utf-8");
    assert!(!stderr.is_empty(), "it logged");
    stderr
        .lines()
        .map(|line| match serde_json::from_str(line) {
            Ok(serde_json::Value::Object(m)) => m,
            other => panic!("not a JSON object: {line:?} ({other:?})"),
        })
        .collect()
}

fn check_keys(lines: &[serde_json::Map<String, serde_json::Value>]) {
    for l in lines {
        assert!(l["ts"].is_f64(), "ts in milliseconds, a float: {l:?}");
        assert!(
            l["caller"].as_str().is_some_and(|c| c.contains(".rs:")),
            "{l:?}"
        );
        assert!(l["msg"].is_string(), "{l:?}");
        if let Some(v) = l.get("v") {
            assert!(v.is_u64(), "{l:?}");
        }
    }
}

#[test]
fn every_line_is_json_with_component_bases_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = unreachable_kubeconfig(dir.path());
    let kubeconfig = kubeconfig.to_str().expect("utf-8 path");
    let lines = json_lines(&["--kubeconfig", kubeconfig, "--logging-format=json", "-v=5"]);
    check_keys(&lines);
    assert!(
        lines
            .iter()
            .any(|l| l.get("v") == Some(&serde_json::json!(4))),
        "-v=5 logs debug lines (v 4)"
    );
    // The fatal error is an error line (no `v`); at -v=5 a trace line of another thread
    // (tower's buffer worker) may still come after it.
    let fatal = lines
        .iter()
        .rev()
        .find(|l| l.get("v").is_none())
        .expect("an error line");
    assert!(
        fatal["msg"]
            .as_str()
            .is_some_and(|m| m.contains("reading the host's id")),
        "the last error is the fatal one: {fatal:?}"
    );
    let after = lines.iter().rev().take_while(|l| l.get("v").is_some());
    assert!(
        after
            .clone()
            .all(|l| l.get("v") == Some(&serde_json::json!(5))),
        "only trace lines after the fatal error: {:?}",
        after.collect::<Vec<_>>()
    );
    // The default verbosity logs no debug line.
    let lines = json_lines(&["--kubeconfig", kubeconfig, "--logging-format=json"]);
    check_keys(&lines);
    assert!(
        lines.iter().all(|l| l.get("v").is_none_or(|v| v == 0)),
        "{lines:?}"
    );
}

#[test]
fn a_configuration_error_is_a_json_line_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- bogus: 1\n",
    )
    .expect("config written");
    let lines = json_lines(&[
        "--config",
        config.to_str().expect("utf-8 path"),
        "--logging-format=json",
    ]);
    check_keys(&lines);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let msg = lines[0]["msg"].as_str().unwrap_or_default();
    assert!(
        msg.contains("profiles[0]: unknown field `bogus`") && msg.contains("line 4, column 3"),
        "{msg}"
    );
}

#[test]
fn bad_logging_flags_are_refused_naming_the_flag() {
    for (flag, name) in [
        ("--logging-format=xml", "--logging-format"),
        ("-v=loud", "--v"),
        ("--log=mcsched_agent=loud", "--log"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_mcsched-agent"))
            .arg(flag)
            .output()
            .expect("the agent runs");
        assert_eq!(out.status.code(), Some(2), "{flag}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("for '{name} <")),
            "{flag}: {stderr}"
        );
    }
}
