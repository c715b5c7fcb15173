//! `kubectl mcsched <TAB>` through the real kubectl: kubectl finds the plugin and
//! kubectl_complete-mcsched on the PATH, runs the latter and relays its completions.

use std::path::Path;
use std::process::Command;

fn kubectl_complete(path: &str, words: &[&str]) -> String {
    let out = Command::new("kubectl")
        .arg("__complete")
        .arg("mcsched")
        .args(words)
        .env("PATH", path)
        .env_remove("KUBECONFIG")
        .output()
        .expect("kubectl runs (it must be on PATH for this test)");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn kubectl_relays_the_plugins_completions() {
    let dir = tempfile::tempdir().expect("dir");
    let bin = dir.path();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_kubectl-mcsched"),
        bin.join("kubectl-mcsched"),
    )
    .expect("plugin link");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../krew/kubectl_complete-mcsched");
    std::os::unix::fs::symlink(&script, bin.join("kubectl_complete-mcsched")).expect("link");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );

    let top = kubectl_complete(&path, &[""]);
    let values: Vec<&str> = top
        .lines()
        .map(|l| l.split('\t').next().unwrap_or(l))
        .collect();
    for want in [
        "join",
        "unjoin",
        "explain",
        "install",
        "get",
        "version",
        "completion",
    ] {
        assert!(values.contains(&want), "{want}: {top}");
    }
    assert!(top.contains("get\tList things mcsched manages\n"), "{top}");
    assert_eq!(values.last(), Some(&":4"), "no file completion: {top}");

    let get = kubectl_complete(&path, &["get", "p"]);
    assert!(get.starts_with("policies\t"), "{get}");
    assert!(get.ends_with(":4\n"), "{get}");

    // Without kubectl_complete-mcsched, kubectl has nothing to offer for the plugin.
    std::fs::remove_file(bin.join("kubectl_complete-mcsched")).expect("unlink");
    let none = kubectl_complete(&path, &[""]);
    assert!(!none.contains("explain"), "{none}");
}
