//! The quick variant of `make bench`, run by `make test`: every workload with every
//! scheduler at small sizes. It asserts that every pod got bound where the workload's
//! constraints allow (no node over its allocatable, anti-affine pods on distinct hosts,
//! zones within maxSkew, required zones kept, no mcsched pod left Pending in a leaf:
//! `mcsched-bench` exits non-zero otherwise) and
//! that the results and the chart were written (to a temporary directory), with the API
//! server's CPU per pod measured in every run from the host control plane's process; no
//! timing is asserted.

use std::process::Command;

#[test]
fn quick_variant_binds_every_pod_and_writes_results() {
    let out = tempfile::tempdir().expect("temporary directory");
    // The agent `make test` built (debug, or $MCSCHED_AGENT); results.md names the build.
    let agent = mcsched_e2e::agent::binary();
    let status = Command::new(env!("CARGO_BIN_EXE_mcsched-bench"))
        .arg("--quick")
        // bind-events, the baseline the goals compare with; bind-only only in `make bench`,
        // to keep the quick variant's time in `make test`.
        .arg("--schedulers=kube-scheduler,mcsched,bind-events")
        .arg("--out")
        .arg(out.path())
        .arg("--agent")
        .arg(&agent)
        .arg("--analysis")
        .arg(out.path().join("no-analysis.md"))
        .status()
        .expect("mcsched-bench runs");
    // A non-zero exit means a run failed, left a pod unbound or broke a constraint (it
    // says which on stderr).
    assert!(status.success(), "mcsched-bench --quick: {status}");

    let results = std::fs::read_to_string(out.path().join("results.md")).expect("results.md");
    for needle in [
        "SchedulingBasic",
        "SchedulingPodAntiAffinity",
        "TopologySpreading",
        "SchedulingNodeAffinity",
        "MultiCluster",
        "MultiClusterFragmented",
        "MultiClusterManyLeaves",
        "## Leaves",
        "CPU ms / pod",
        "kube-scheduler",
        "mcsched",
        "bind-only",
        "## Targets",
    ] {
        assert!(
            results.contains(needle),
            "results.md lacks {needle}:\n{results}"
        );
    }
    // Every run measured what it cost the API server.
    let header = results
        .lines()
        .find(|l| l.starts_with("| workload | size | scheduler |"))
        .expect("the results table");
    let column = header
        .split('|')
        .position(|c| c.trim() == "API server CPU ms / pod")
        .expect("an API server CPU column");
    let runs: Vec<&str> = results
        .lines()
        .skip_while(|l| *l != header)
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert_eq!(
        runs.len(),
        7 * 3,
        "one row per workload and scheduler:\n{results}"
    );
    for row in &runs {
        let cell = row.split('|').nth(column).unwrap_or_default().trim();
        assert!(
            cell.parse::<f64>().is_ok_and(|v| v > 0.0),
            "no API server CPU measured in:\n{row}"
        );
    }
    // ...and read it from the host's control plane process (kube-apiserver and etcd), not
    // from the scheduler's or a leaf's: a scheduler's process uses CPU too, so a figure
    // above zero alone would not tell.
    let program = mcsched_e2e::controlplane::binary();
    let program = program
        .file_name()
        .and_then(|n| n.to_str())
        .expect("the controlplane binary's name");
    let api_server = format!("{program} --name {}", mcsched_bench::run::HOST_NAME);
    let read = results
        .split("## Processes read")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .unwrap_or_default();
    let read: Vec<Vec<&str>> = read
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| workload"))
        .map(|l| l.split('|').map(str::trim).collect())
        .collect();
    assert_eq!(
        read.len(),
        runs.len(),
        "one process row per run:\n{results}"
    );
    for row in read {
        let (scheduler, api, sched) = (row[2], process(row[3]), process(row[4]));
        assert!(
            api.1.starts_with(&api_server),
            "{} / {scheduler}: the API server figure came from `{}`, not `{api_server} …`",
            row[1],
            api.1
        );
        let expected = match scheduler {
            "kube-scheduler" => format!("{program} scheduler"),
            "mcsched" => "mcsched-agent".to_string(),
            _ => "mcsched-bench bind-only".to_string(),
        };
        assert!(
            sched.1.starts_with(&expected) && sched.0 != api.0,
            "{} / {scheduler}: the scheduler's figures came from pid {} `{}`",
            row[1],
            sched.0,
            sched.1
        );
    }
    // Every multi-cluster run of mcsched probed each of its leaves, and every change made
    // in a leaf showed in its virtual node's status.
    let leaves = results
        .split("## Leaves")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .unwrap_or_default();
    let rows: Vec<&str> = leaves
        .lines()
        .filter(|l| l.starts_with("| MultiCluster"))
        .collect();
    assert_eq!(
        rows.len(),
        3,
        "one row per multi-cluster workload:\n{leaves}"
    );
    for row in rows {
        assert!(
            row.contains(" missed) |") && row.contains(", 0 missed)") && !row.contains("| – ("),
            "a leaf change never reached its virtual node:\n{row}"
        );
    }
    let png = std::fs::read(out.path().join("results.png")).expect("results.png");
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "results.png is not a PNG"
    );
}

/// `pid N: `command``, as results.md's *Processes read* writes it.
fn process(cell: &str) -> (u32, String) {
    let (pid, command) = cell
        .strip_prefix("pid ")
        .and_then(|c| c.split_once(": "))
        .unwrap_or_else(|| panic!("not a process: {cell}"));
    (
        pid.parse().unwrap_or_else(|_| panic!("not a pid: {cell}")),
        command.trim_matches('`').to_string(),
    )
}
