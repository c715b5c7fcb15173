//! The checks held to k8s.io/pod-security-admission's own fixtures: every pod of its
//! `test/testdata/{baseline,restricted}/v1.N/{pass,fail}` is judged at that level and
//! version, as the leaf's admission would judge it. The module is read from the Go module
//! cache at the version tests/controlplane/go.mod pins (the control plane the end-to-end
//! tests run is built from that module, so the fixtures are those of the admission the
//! leaves run); `make controlplane` downloads it.
//!
//! A `pass` fixture must be allowed. A `fail` fixture (named after its check, lowercased,
//! and an index: `capabilities_baseline2.yaml`) must be refused by that check, or by the
//! restricted check that replaces it at that version, and the refusal must contain the
//! substring upstream's own test (`test/run.go`) expects of it: the generator's
//! `expectErrorSubstring`, read from `test/fixtures_*.go`, else the check's ID.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::core::v1::Pod;

use super::{CHECKS, Enforce, Level, Version, at, evaluate_checks};

const MODULE: &str = "k8s.io/pod-security-admission";

/// The version of [`MODULE`] tests/controlplane/go.mod builds with: its `replace`
/// target when there is one (k8s.io/kubernetes requires the staging modules at v0.0.0
/// and the file pins each with a replace), else its `require` line.
fn pinned_version(go_mod: &str) -> Option<String> {
    let mut required = None;
    let mut replaced = None;
    for line in go_mod.lines() {
        let line = line.split("//").next().unwrap_or_default().trim();
        let line = line
            .strip_prefix("replace ")
            .or_else(|| line.strip_prefix("require "))
            .unwrap_or(line)
            .trim();
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            [m, "=>", target, version] if *m == MODULE && *target == MODULE => {
                replaced = Some(version.to_string());
            }
            [m, version] if *m == MODULE => required = Some(version.to_string()),
            _ => {}
        }
    }
    replaced.or(required)
}

/// `$(go env GOMODCACHE)/k8s.io/pod-security-admission@<pinned>`, or why not.
fn module_dir() -> Result<PathBuf, String> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let go_mod_path = repo.join("tests/controlplane/go.mod");
    let go_mod = std::fs::read_to_string(&go_mod_path)
        .map_err(|e| format!("reading {}: {e}", go_mod_path.display()))?;
    let version = pinned_version(&go_mod)
        .ok_or_else(|| format!("{} does not pin {MODULE}", go_mod_path.display()))?;
    let out = Command::new("go")
        .args(["env", "GOMODCACHE"])
        .output()
        .map_err(|e| format!("running `go env GOMODCACHE` (is Go installed?): {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`go env GOMODCACHE` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let cache = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if cache.is_empty() {
        return Err("`go env GOMODCACHE` printed nothing".to_string());
    }
    // The module path has no upper-case letters, so the cache's case escaping
    // (`!x` for `X`) leaves it as it is.
    Ok(Path::new(&cache).join(format!("{MODULE}@{version}")))
}

/// What upstream's test expects a failing fixture's error to contain, per check ID: the
/// `expectErrorSubstring` of the generators each `test/fixtures_*.go` registers (every
/// generator of a file registers checks of that file; a file whose generators expect
/// different substrings is reported, not guessed at).
fn expected_substrings(test_dir: &Path) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    let entries =
        std::fs::read_dir(test_dir).map_err(|e| format!("{}: {e}", test_dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if !name.starts_with("fixtures_") || !name.ends_with(".go") || name.ends_with("_test.go") {
            continue;
        }
        let src = std::fs::read_to_string(&path).map_err(|e| format!("{name}: {e}"))?;
        let substrings: BTreeSet<String> = go_string_fields(&src, "expectErrorSubstring:");
        let checks = go_string_fields(&src, "check:");
        if substrings.len() > 1 {
            return Err(format!(
                "{name}: generators expect different substrings {substrings:?}; pair them by hand"
            ));
        }
        for check in checks {
            let expected = substrings.iter().next().cloned().unwrap_or(check.clone());
            out.insert(check, expected);
        }
    }
    Ok(out)
}

/// The string literals following `field` in Go source (`check: "hostPorts"`).
fn go_string_fields(src: &str, field: &str) -> BTreeSet<String> {
    src.match_indices(field)
        .filter_map(|(i, _)| {
            let rest = src[i + field.len()..].trim_start().strip_prefix('"')?;
            rest.split('"').next().map(str::to_string)
        })
        .collect()
}

#[test]
fn upstream_fixtures_judged_as_pod_security_admission() {
    let dir = module_dir().unwrap_or_else(|e| panic!("{e}"));
    let testdata = dir.join("test/testdata");
    assert!(
        testdata.is_dir(),
        "{} is not in the Go module cache ({} missing): run `make controlplane` \
         (it downloads tests/controlplane's modules) and test again",
        MODULE,
        testdata.display()
    );
    let substrings = expected_substrings(&dir.join("test")).unwrap_or_else(|e| panic!("{e}"));
    let ids: BTreeMap<String, &str> = CHECKS.iter().map(|c| (c.id.to_lowercase(), c.id)).collect();

    let mut counts: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut wrong = Vec::new();
    let mut total = 0;
    for (level, level_name) in [
        (Level::Baseline, "baseline"),
        (Level::Restricted, "restricted"),
    ] {
        let level_dir = testdata.join(level_name);
        let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(&level_dir)
            .unwrap_or_else(|e| panic!("{}: {e}", level_dir.display()))
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let minor = name.strip_prefix("v1.")?.parse().ok()?;
                Some((minor, e.path()))
            })
            .collect();
        versions.sort();
        assert!(
            !versions.is_empty(),
            "no v1.N under {}",
            level_dir.display()
        );
        for (minor, vdir) in versions {
            let enforce = Enforce {
                level,
                version: Version::Minor(minor),
            };
            // As a leaf of that version judges it: checks newer than NEWEST_MINOR are
            // not here, and the fixtures of such a version say so by failing.
            let effective = enforce.version.effective(Some(minor));
            for (outcome, want_pass) in [("pass", true), ("fail", false)] {
                let odir = vdir.join(outcome);
                let Ok(entries) = std::fs::read_dir(&odir) else {
                    continue;
                };
                let mut files: Vec<PathBuf> = entries
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
                    .collect();
                files.sort();
                for file in files {
                    total += 1;
                    let rel = file
                        .strip_prefix(&testdata)
                        .unwrap_or(&file)
                        .display()
                        .to_string();
                    let stem = file
                        .file_stem()
                        .and_then(|s| s.to_str())
                        .unwrap_or_default();
                    let text =
                        std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{rel}: {e}"));
                    let pod: Pod = mcsched_shared::yaml::from_str(&text)
                        .unwrap_or_else(|e| panic!("{rel} does not read as a pod: {e}"));
                    let spec = pod.spec.clone().unwrap_or_default();
                    let fired = evaluate_checks(level, effective, &pod.metadata, &spec);
                    let refusal = enforce.refusal(&pod.metadata, &spec, Some(minor));
                    let entry = counts.entry(outcome).or_default();
                    let verdict = if want_pass {
                        match refusal {
                            None => Ok(()),
                            Some(r) => Err(format!("refused: {r}")),
                        }
                    } else {
                        judge_fail(stem, &ids, &substrings, minor, &fired, refusal)
                    };
                    match verdict {
                        Ok(()) => entry.0 += 1,
                        Err(why) => {
                            entry.1 += 1;
                            wrong.push(format!("{rel}: {why}"));
                        }
                    }
                }
            }
        }
    }
    let summary: Vec<String> = counts
        .iter()
        .map(|(o, (ok, bad))| format!("{o}: {ok} as upstream, {bad} not"))
        .collect();
    eprintln!("{total} fixtures; {}", summary.join("; "));
    assert!(total > 0, "no fixtures under {}", testdata.display());
    assert!(
        wrong.is_empty(),
        "{} of {total} fixtures judged unlike pod-security-admission ({}):\n{}",
        wrong.len(),
        summary.join("; "),
        wrong.join("\n")
    );
}

/// A `fail` fixture named `<check><n>`: refused, by that check (or the restricted one
/// replacing it at `minor`), with upstream's expected substring in the refusal.
fn judge_fail(
    stem: &str,
    ids: &BTreeMap<String, &str>,
    substrings: &BTreeMap<String, String>,
    minor: u32,
    fired: &[(&'static str, super::Forbidden)],
    refusal: Option<String>,
) -> Result<(), String> {
    let Some(refusal) = refusal else {
        return Err("allowed".to_string());
    };
    let lower = stem.trim_end_matches(|c: char| c.is_ascii_digit());
    let Some(&id) = ids.get(lower) else {
        return Err(format!(
            "names check {lower:?}, which pod_security.rs does not have (refused: {refusal})"
        ));
    };
    let replaced_by: Vec<&str> = CHECKS
        .iter()
        .filter(|c| at(c, minor).is_some_and(|v| v.overrides.contains(&id)))
        .map(|c| c.id)
        .collect();
    if !fired
        .iter()
        .any(|(f, _)| *f == id || replaced_by.contains(f))
    {
        let fired: Vec<&str> = fired.iter().map(|(f, _)| *f).collect();
        return Err(format!(
            "refused by {fired:?}, not by {id}{}: {refusal}",
            if replaced_by.is_empty() {
                String::new()
            } else {
                format!(" or {replaced_by:?}")
            }
        ));
    }
    let want = substrings.get(id).map_or(id, String::as_str);
    if !refusal.contains(want) {
        return Err(format!("refusal lacks {want:?}: {refusal}"));
    }
    Ok(())
}

#[test]
fn the_pinned_version_is_the_replace_target() {
    let go_mod = "require (\n\tk8s.io/pod-security-admission v0.0.0 // indirect\n)\n\
                  replace (\n\tk8s.io/pod-security-admission => k8s.io/pod-security-admission v0.37.2\n)\n";
    assert_eq!(pinned_version(go_mod).as_deref(), Some("v0.37.2"));
    assert_eq!(
        pinned_version("require k8s.io/pod-security-admission v0.36.1\n").as_deref(),
        Some("v0.36.1")
    );
    assert_eq!(pinned_version("module x\n"), None);
}
