//! krew packaging: krew/mcsched.yaml checked against krew's manifest rules, and the archive
//! of scripts/package.sh installed the way `kubectl krew install` does it, then run by the
//! real kubectl as `kubectl mcsched version --client`.
//!
//! The rules are those of krew's pkg/index/validation (ValidatePlugin, validatePlatform,
//! validateFiles, validateSelector) and cmd/validate-krew-manifest (manifest file named
//! after the plugin, no os/arch matched by two platforms, line-length warnings), plus the
//! plugin-manifest guide (shortDescription "a few words", no redundant words such as
//! "kubectl"; description required) and what this project requires: the four platforms,
//! uris of the release of this version, kubectl-mcsched, kubectl_complete-mcsched and
//! LICENSE in every archive.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail, ensure};
use serde::Deserialize;

const API_VERSION: &str = "krew.googlecontainertools.github.com/v1alpha2";
const REQUIRED_PLATFORMS: [(&str, &str); 4] = [
    ("linux", "amd64"),
    ("linux", "arm64"),
    ("darwin", "amd64"),
    ("darwin", "arm64"),
];
const HOMEPAGE: &str = "https://github.com/mcsched/mcsched";
const WINDOWS_FORBIDDEN: [&str; 22] = [
    "CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8",
    "COM9", "LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9",
];

// krew decodes manifests strictly: an unknown field is an error, hence deny_unknown_fields
// (metadata is a full ObjectMeta in krew, so it is not strict here).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Plugin {
    api_version: String,
    kind: String,
    metadata: Metadata,
    spec: Spec,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
struct Metadata {
    name: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Spec {
    version: String,
    homepage: Option<String>,
    short_description: Option<String>,
    description: Option<String>,
    caveats: Option<String>,
    #[serde(default)]
    platforms: Vec<Platform>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Platform {
    selector: Option<Selector>,
    #[serde(default)]
    uri: String,
    #[serde(default)]
    sha256: String,
    #[serde(default)]
    bin: String,
    files: Option<Vec<FileOperation>>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Selector {
    match_labels: Option<BTreeMap<String, String>>,
    match_expressions: Option<Vec<serde_json::Value>>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileOperation {
    #[serde(default)]
    from: String,
    #[serde(default)]
    to: String,
}

impl Platform {
    fn os_arch(&self) -> Option<(&str, &str)> {
        let labels = self.selector.as_ref()?.match_labels.as_ref()?;
        Some((labels.get("os")?.as_str(), labels.get("arch")?.as_str()))
    }
}

fn repo_root() -> PathBuf {
    mcsched_e2e::repo_root()
}

fn read_manifest(path: &Path) -> anyhow::Result<Plugin> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    mcsched_shared::yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A relative path that stays inside the plugin's directory ("." and "./x" allowed).
fn stays_inside(path: &str) -> bool {
    let p = Path::new(path);
    !p.is_absolute()
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// Where a file operation puts its file, relative to the plugin's directory.
fn destination(op: &FileOperation) -> PathBuf {
    let name = Path::new(&op.from).file_name().map(PathBuf::from);
    let to = Path::new(&op.to);
    let dest = if op.to == "." || op.to.ends_with('/') {
        to.join(name.unwrap_or_default())
    } else {
        to.to_path_buf()
    };
    normalize(&dest)
}

fn normalize(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect()
}

fn lines_longer_than(s: &str, max: usize) -> Vec<&str> {
    // validate-krew-manifest: a longer line is fine if it is a single word (e.g. a URL).
    s.lines()
        .filter(|l| l.chars().count() > max && l.trim().contains(' '))
        .collect()
}

/// Every rule `plugin` breaks, as messages; `file_name` is the manifest's file name.
fn violations(file_name: &str, plugin: &Plugin, version: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let mut err = |m: String| errs.push(m);

    if plugin.api_version != API_VERSION {
        err(format!(
            "apiVersion is {:?}, not {API_VERSION:?}",
            plugin.api_version
        ));
    }
    if plugin.kind != "Plugin" {
        err(format!("kind is {:?}, not \"Plugin\"", plugin.kind));
    }
    let name = file_name.strip_suffix(".yaml").unwrap_or("");
    if name.is_empty() {
        err(format!("manifest file {file_name:?} does not end in .yaml"));
    }
    let safe = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !WINDOWS_FORBIDDEN
            .iter()
            .any(|f| f.eq_ignore_ascii_case(name));
    if !safe {
        err(format!(
            "plugin name {name:?} must match ^[\\w-]+$ and not be a Windows device name"
        ));
    }
    if plugin.metadata.name != name {
        err(format!(
            "metadata.name is {:?}, the file says {name:?}",
            plugin.metadata.name
        ));
    }

    let spec = &plugin.spec;
    match spec.version.strip_prefix('v') {
        None => err(format!("version {:?} lacks the leading v", spec.version)),
        Some(v) => {
            if let Err(e) = semver::Version::parse(v) {
                err(format!("version {:?} is not semver: {e}", spec.version));
            }
        }
    }
    if spec.version != format!("v{version}") {
        err(format!(
            "version is {:?}, the workspace is {version}",
            spec.version
        ));
    }
    if spec.homepage.as_deref() != Some(HOMEPAGE) {
        err(format!("homepage is {:?}, not {HOMEPAGE}", spec.homepage));
    }
    match spec.short_description.as_deref().map(str::trim) {
        None | Some("") => err("shortDescription is missing".into()),
        Some(s) => {
            if s.chars().count() > 50 || s.contains('\n') {
                err(format!(
                    "shortDescription {s:?} is not one short line (<= 50 chars)"
                ));
            }
            if s.to_lowercase().contains("kubectl") {
                err(format!("shortDescription {s:?} repeats \"kubectl\""));
            }
        }
    }
    match spec.description.as_deref().map(str::trim) {
        None | Some("") => err("description is missing".into()),
        Some(d) => {
            for l in lines_longer_than(d, 80) {
                err(format!("description line longer than 80 chars: {l:?}"));
            }
        }
    }
    for l in lines_longer_than(spec.caveats.as_deref().unwrap_or(""), 80) {
        err(format!("caveats line longer than 80 chars: {l:?}"));
    }

    if spec.platforms.is_empty() {
        err("no platforms".into());
    }
    for (i, p) in spec.platforms.iter().enumerate() {
        let at = format!("platforms[{i}]");
        match &p.selector {
            None => err(format!("{at}: no selector")),
            Some(sel) => {
                if sel.match_expressions.is_some() {
                    err(format!(
                        "{at}: use matchLabels {{os, arch}}, not matchExpressions"
                    ));
                }
                match &sel.match_labels {
                    None => err(format!("{at}: no selector.matchLabels")),
                    Some(l) if l.is_empty() => {
                        err(format!("{at}: matchLabels specified but empty"))
                    }
                    Some(l) => {
                        for k in l.keys().filter(|k| *k != "os" && *k != "arch") {
                            err(format!("{at}: selector key {k:?} not supported (os, arch)"));
                        }
                    }
                }
            }
        }
        let os_arch = p.os_arch();
        if os_arch.is_none() {
            err(format!("{at}: selector must name both os and arch"));
        }
        if !p.uri.starts_with("https://") {
            err(format!("{at}: uri {:?} is not https", p.uri));
        }
        if let Some((os, arch)) = os_arch {
            let want = format!(
                "{HOMEPAGE}/releases/download/{}/kubectl-mcsched_{os}_{arch}.tar.gz",
                spec.version
            );
            if p.uri != want {
                err(format!("{at}: uri {:?}, expected {want:?}", p.uri));
            }
        }
        if !is_sha256(&p.sha256) {
            err(format!(
                "{at}: sha256 {:?} is not 64 lowercase hex digits",
                p.sha256
            ));
        }
        if p.bin.is_empty() {
            err(format!("{at}: bin has to be set"));
        }
        let Some(files) = &p.files else {
            // krew's default is `from: "*", to: "."`; this project lists its files.
            err(format!("{at}: files is not specified"));
            continue;
        };
        if files.is_empty() {
            err(format!("{at}: files has to be unspecified or non-empty"));
        }
        for op in files {
            if op.from.is_empty() || op.to.is_empty() {
                err(format!(
                    "{at}: file operation {op:?} needs both from and to"
                ));
            } else if !stays_inside(&op.from) || !stays_inside(&op.to) {
                err(format!(
                    "{at}: file operation {op:?} leaves the plugin directory"
                ));
            }
        }
        let installed: Vec<PathBuf> = files.iter().map(destination).collect();
        if !installed.contains(&normalize(Path::new(&p.bin))) {
            err(format!(
                "{at}: bin {:?} is not put in place by files {installed:?}",
                p.bin
            ));
        }
        if !installed.contains(&PathBuf::from("LICENSE")) {
            err(format!("{at}: files do not install LICENSE"));
        }
    }
    for (os, arch) in REQUIRED_PLATFORMS {
        let n = spec
            .platforms
            .iter()
            .filter(|p| p.os_arch() == Some((os, arch)))
            .count();
        if n != 1 {
            err(format!("platform {os}/{arch} appears {n} times, not once"));
        }
    }
    errs
}

fn ensure_valid(file_name: &str, plugin: &Plugin) -> anyhow::Result<()> {
    let errs = violations(file_name, plugin, env!("CARGO_PKG_VERSION"));
    ensure!(
        errs.is_empty(),
        "{file_name} breaks krew's rules:\n  {}",
        errs.join("\n  ")
    );
    Ok(())
}

fn this_platform() -> Option<(&'static str, &'static str)> {
    let os = match std::env::consts::OS {
        "linux" => "linux",
        "macos" => "darwin",
        _ => return None,
    };
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        _ => return None,
    };
    Some((os, arch))
}

/// Breaks one rule of a valid manifest.
type Breaker = Box<dyn Fn(&mut Plugin)>;

#[test]
fn manifest_follows_krews_rules() -> anyhow::Result<()> {
    let plugin = read_manifest(&repo_root().join("krew/mcsched.yaml"))?;
    ensure_valid("mcsched.yaml", &plugin)?;

    // The checker is not vacuous: each of these breaks exactly the rule named.
    let version = env!("CARGO_PKG_VERSION");
    let broken: Vec<(&str, Breaker)> = vec![
        ("apiVersion", Box::new(|p| p.api_version = "v1".into())),
        (
            "metadata.name",
            Box::new(|p| p.metadata.name = "other".into()),
        ),
        (
            "lacks the leading v",
            Box::new(|p| p.spec.version = version.into()),
        ),
        (
            "not 64 lowercase hex",
            Box::new(|p| p.spec.platforms[0].sha256 = "AB".repeat(32)),
        ),
        (
            "is not https",
            Box::new(|p| {
                p.spec.platforms[0].uri = p.spec.platforms[0].uri.replace("https:", "http:")
            }),
        ),
        (
            "appears 2 times",
            Box::new(|p| p.spec.platforms[1] = p.spec.platforms[0].clone()),
        ),
        (
            "is not put in place",
            Box::new(|p| p.spec.platforms[0].bin = "kubectl-other".into()),
        ),
        (
            "do not install LICENSE",
            Box::new(|p| {
                if let Some(f) = p.spec.platforms[0].files.as_mut() {
                    f.retain(|op| op.from != "LICENSE");
                }
            }),
        ),
        (
            "leaves the plugin directory",
            Box::new(|p| {
                if let Some(f) = p.spec.platforms[0].files.as_mut() {
                    f[0].to = "../kubectl-mcsched".into();
                }
            }),
        ),
        (
            "repeats \"kubectl\"",
            Box::new(|p| p.spec.short_description = Some("kubectl plugin".into())),
        ),
        (
            "shortDescription is missing",
            Box::new(|p| p.spec.short_description = None),
        ),
        (
            "selector key",
            Box::new(|p| {
                if let Some(l) = p.spec.platforms[0]
                    .selector
                    .as_mut()
                    .and_then(|s| s.match_labels.as_mut())
                {
                    l.insert("distro".into(), "debian".into());
                }
            }),
        ),
    ];
    for (rule, breaks) in broken {
        let mut p = plugin.clone();
        breaks(&mut p);
        let errs = violations("mcsched.yaml", &p, version);
        ensure!(
            errs.iter().any(|e| e.contains(rule)),
            "breaking {rule:?} was not caught: {errs:?}"
        );
    }
    ensure!(
        violations("other.yaml", &plugin, version)
            .iter()
            .any(|e| e.contains("the file says")),
        "a manifest file not named after the plugin was not caught"
    );
    Ok(())
}

/// Copies `from` (relative to `src`) to its destination under `dst`, like krew's file
/// operations (no wildcards: this manifest names its files).
fn apply_file_operation(src: &Path, dst: &Path, op: &FileOperation) -> anyhow::Result<()> {
    ensure!(
        !op.from.contains(['*', '?', '[']),
        "wildcards are not emulated: {op:?}"
    );
    let from = src.join(&op.from);
    let to = dst.join(destination(op));
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::copy(&from, &to).with_context(|| format!("{} -> {}", from.display(), to.display()))?;
    Ok(())
}

#[test]
fn package_installs_like_krew_and_runs_as_kubectl_mcsched() -> anyhow::Result<()> {
    let Some((os, arch)) = this_platform() else {
        eprintln!("skipped: the manifest has no platform for this machine");
        return Ok(());
    };
    let version = env!("CARGO_PKG_VERSION");
    let root = repo_root();
    let tmp = tempfile::tempdir()?;
    let dist = tmp.path().join("dist");

    // The debug build (the one `make test` has just done) unless MCSCHED_KREW_RELEASE=1:
    // the same packaging, without a release build of several minutes.
    let release = std::env::var("MCSCHED_KREW_RELEASE").is_ok_and(|v| v == "1");
    let mut package = Command::new("bash");
    package
        .arg(root.join("scripts/package.sh"))
        .env("MCSCHED_DIST_DIR", &dist)
        .current_dir(&root);
    // What cargo set for this test (CARGO_MANIFEST_DIR, CARGO_PKG_*, ...) must not reach the
    // inner cargo: ring's build script watches CARGO_MANIFEST_DIR, and a different value
    // would rebuild ring, rustls and kube here and again in the next outer build.
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("CARGO_") && k != "CARGO_HOME" && k != "CARGO_TARGET_DIR" {
            package.env_remove(&key);
        }
    }
    if !release {
        package.arg("--debug");
    }
    let started = Instant::now();
    let out = package.output().context("running scripts/package.sh")?;
    eprintln!(
        "scripts/package.sh{} took {:.1?}",
        if release { "" } else { " --debug" },
        started.elapsed()
    );
    ensure!(
        out.status.success(),
        "scripts/package.sh failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // The manifest it wrote: still valid, this platform's real sha256, the rest unchanged.
    let archive = dist.join(format!("kubectl-mcsched_{os}_{arch}.tar.gz"));
    let bytes = std::fs::read(&archive).with_context(|| format!("{}", archive.display()))?;
    let sha256: String = ring::digest::digest(&ring::digest::SHA256, &bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let committed = read_manifest(&root.join("krew/mcsched.yaml"))?;
    let written = read_manifest(&dist.join("mcsched.yaml"))?;
    ensure_valid("mcsched.yaml", &written)?;
    let mut expected = committed.clone();
    for p in &mut expected.spec.platforms {
        if p.os_arch() == Some((os, arch)) {
            p.sha256 = sha256.clone();
        }
    }
    ensure!(
        written == expected,
        "dist/mcsched.yaml is not krew/mcsched.yaml with sha256 {sha256} for {os}/{arch}:\n{written:#?}"
    );
    let platform = written
        .spec
        .platforms
        .iter()
        .find(|p| p.os_arch() == Some((os, arch)))
        .context("no platform for this machine in the written manifest")?;

    // The archive holds exactly kubectl-mcsched, its kubectl completion and LICENSE, at
    // its root.
    let listing = Command::new("tar").arg("-tzf").arg(&archive).output()?;
    ensure!(listing.status.success(), "tar -tzf {}", archive.display());
    let mut entries: Vec<String> = String::from_utf8(listing.stdout)?
        .lines()
        .map(|l| l.trim_start_matches("./").to_string())
        .filter(|l| !l.is_empty())
        .collect();
    entries.sort();
    ensure!(
        entries == ["LICENSE", "kubectl-mcsched", "kubectl_complete-mcsched"],
        "archive entries {entries:?}"
    );

    // Install as krew does: unpack into a download directory, apply `files` into the
    // store (KREW_ROOT/store/NAME/VERSION), link KREW_ROOT/bin/kubectl-NAME to `bin`.
    let download = tmp.path().join("download");
    std::fs::create_dir_all(&download)?;
    let unpack = Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(&download)
        .status()?;
    ensure!(unpack.success(), "unpacking {}", archive.display());
    let krew_root = tmp.path().join("krew");
    let store = krew_root
        .join("store")
        .join(&written.metadata.name)
        .join(&written.spec.version);
    std::fs::create_dir_all(&store)?;
    for op in platform.files.as_deref().unwrap_or_default() {
        apply_file_operation(&download, &store, op)?;
    }
    let bin = store.join(normalize(Path::new(&platform.bin)));
    ensure!(bin.is_file(), "bin {} not installed", bin.display());
    ensure!(
        std::fs::read(store.join("LICENSE"))? == std::fs::read(root.join("LICENSE"))?,
        "installed LICENSE differs from the repository's"
    );
    let bin_dir = krew_root.join("bin");
    std::fs::create_dir_all(&bin_dir)?;
    let link = bin_dir.join(format!(
        "kubectl-{}",
        written.metadata.name.replace('-', "_")
    ));
    std::os::unix::fs::symlink(&bin, &link)?;

    // The real kubectl finds the plugin through PATH; ours is the first on it.
    let path = match std::env::var_os("PATH") {
        Some(p) => {
            std::env::join_paths(std::iter::once(bin_dir.clone()).chain(std::env::split_paths(&p)))?
        }
        None => bin_dir.clone().into_os_string(),
    };
    let first = std::env::split_paths(&path)
        .map(|d| d.join("kubectl-mcsched"))
        .find(|f| f.exists());
    ensure!(
        first.as_deref() == Some(link.as_path()),
        "PATH finds {first:?} first"
    );
    let out = Command::new("kubectl")
        .args(["mcsched", "version", "--client"])
        .env("PATH", &path)
        .env("KUBECONFIG", tmp.path().join("no-such-kubeconfig"))
        .output()
        .context("running kubectl (is it installed?)")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "kubectl mcsched version --client failed ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    ensure!(
        stdout.trim() == format!("kubectl-mcsched {version}"),
        "kubectl mcsched version --client printed {stdout:?}"
    );
    Ok(())
}
