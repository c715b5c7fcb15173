//! The v1.37 API's own `.proto` files and the JSON shape of its Go types, taken at build
//! time from the Go modules they are published in (k8s.io/api and k8s.io/apimachinery,
//! the release the test control plane builds), so that nothing of theirs is copied into
//! this repository. `go mod download` fetches them into (or finds them in) the Go module
//! cache; MCSCHED_K8S_API_DIR and MCSCHED_K8S_APIMACHINERY_DIR point at unpacked module
//! directories instead, for a build without Go (the Dockerfile's).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// k8s.io/api and k8s.io/apimachinery of Kubernetes v1.37.2; tests/controlplane/go.mod
/// pins the same (a unit test checks it).
const VERSION: &str = "v0.37.2";
const API: &str = "k8s.io/api";
const MACHINERY: &str = "k8s.io/apimachinery";

/// (output name, module, path of generated.proto in the module).
const PROTOS: &[(&str, &str, &str)] = &[
    ("core_v1", API, "core/v1"),
    ("meta_v1", MACHINERY, "pkg/apis/meta/v1"),
    ("resource", MACHINERY, "pkg/api/resource"),
    ("intstr", MACHINERY, "pkg/util/intstr"),
    ("runtime", MACHINERY, "pkg/runtime"),
    ("runtime_schema", MACHINERY, "pkg/runtime/schema"),
];

/// Go packages whose types say what the .proto files do not: (module, dir, proto package).
const GO_TYPES: &[(&str, &str, &str)] = &[
    (API, "core/v1", "k8s.io.api.core.v1"),
    (
        MACHINERY,
        "pkg/apis/meta/v1",
        "k8s.io.apimachinery.pkg.apis.meta.v1",
    ),
];

fn main() -> ExitCode {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=MCSCHED_K8S_API_DIR");
    println!("cargo:rerun-if-env-changed=MCSCHED_K8S_APIMACHINERY_DIR");
    println!("cargo:rustc-env=MCSCHED_K8S_API_VERSION={VERSION}");
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "error: mcsched-wire needs the .proto files of {API}@{VERSION} and {MACHINERY}@{VERSION}: {e}"
            );
            eprintln!(
                "Install Go (it runs `go mod download`), or set MCSCHED_K8S_API_DIR and \
                 MCSCHED_K8S_APIMACHINERY_DIR to those modules' unpacked directories."
            );
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let out = PathBuf::from(std::env::var("OUT_DIR").map_err(|e| format!("OUT_DIR: {e}"))?);
    let (api, machinery) = module_dirs(&out)?;
    let dir_of = |module: &str| if module == API { &api } else { &machinery };
    for (name, module, path) in PROTOS {
        let file = dir_of(module).join(path).join("generated.proto");
        let text = read(&file)?;
        write(&out.join(format!("{name}.proto")), &without_comments(&text))?;
    }
    let mut shape = Vec::new();
    for (module, path, package) in GO_TYPES {
        json_shape(&dir_of(module).join(path), package, &mut shape)?;
    }
    shape.sort();
    shape.dedup();
    write(&out.join("json_shape.txt"), &(shape.join("\n") + "\n"))
}

fn module_dirs(out: &Path) -> Result<(PathBuf, PathBuf), String> {
    let from_env = |var: &str| std::env::var_os(var).map(PathBuf::from);
    if let (Some(api), Some(machinery)) = (
        from_env("MCSCHED_K8S_API_DIR"),
        from_env("MCSCHED_K8S_APIMACHINERY_DIR"),
    ) {
        return Ok((api, machinery));
    }
    let go = std::env::var_os("GO").unwrap_or_else(|| "go".into());
    // From OUT_DIR, so that no go.mod above the caller's directory is consulted.
    let output = Command::new(&go)
        .current_dir(out)
        .args(["mod", "download", "-json"])
        .arg(format!("{API}@{VERSION}"))
        .arg(format!("{MACHINERY}@{VERSION}"))
        .env("GO111MODULE", "on")
        .env("GOFLAGS", "-mod=mod")
        .output()
        .map_err(|e| format!("running {}: {e}", go.to_string_lossy()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut dirs = (None, None);
    for doc in serde_json::Deserializer::from_str(&stdout).into_iter::<serde_json::Value>() {
        let doc = doc.map_err(|e| format!("reading `go mod download -json`: {e}"))?;
        if let Some(err) = doc.get("Error").and_then(|e| e.as_str()) {
            return Err(format!("go mod download: {err}"));
        }
        let dir = doc.get("Dir").and_then(|d| d.as_str()).map(PathBuf::from);
        match doc.get("Path").and_then(|p| p.as_str()) {
            Some(API) => dirs.0 = dir,
            Some(MACHINERY) => dirs.1 = dir,
            _ => {}
        }
    }
    match dirs {
        (Some(api), Some(machinery)) => Ok((api, machinery)),
        _ => Err(format!(
            "go mod download gave no directory (exit {}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )),
    }
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The file without `//` and `/* */` comments (the decoder's parser reads statements).
fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        match (rest.find("//"), rest.find("/*")) {
            (Some(l), b) if b.is_none_or(|b| l < b) => {
                out.push_str(&rest[..l]);
                rest = rest[l..].find('\n').map_or("", |n| &rest[l + n..]);
            }
            (_, Some(b)) => {
                out.push_str(&rest[..b]);
                rest = rest[b..].find("*/").map_or("", |e| &rest[b + e + 2..]);
            }
            _ => {
                out.push_str(rest);
                rest = "";
            }
        }
    }
    out
}

/// `keep package.Message.jsonName`: a scalar whose zero the API server's JSON keeps (a Go
/// pointer, or no `omitempty`; protobuf writes every non-pointer scalar, zero or not, and
/// the decoder drops the zeros JSON would omit). `inline package.Message.fieldNumber`: an
/// embedded struct (`json:",inline"` or `json:""`) whose fields JSON puts in its parent's.
fn json_shape(dir: &Path, package: &str, out: &mut Vec<String>) -> Result<(), String> {
    let field = regex::Regex::new(
        r#"^\s+(\w+)\s+(\*?)([\w.\[\]]+)\s+`json:"([^"]*)"[^`]*protobuf:"(varint|bytes|fixed\d+),"#,
    )
    .map_err(|e| e.to_string())?;
    // An embedded struct whose JSON name is empty: `json:",inline"` until v1.36, `json:""`
    // from v1.37; encoding/json inlines both.
    let inline = regex::Regex::new(r#"^\s+(\w+)\s+`json:"(?:,[\w,]*)?"\s+protobuf:"bytes,(\d+),"#)
        .map_err(|e| e.to_string())?;
    let strukt = regex::Regex::new(r"^type (\w+) struct").map_err(|e| e.to_string())?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.ends_with(".go")
                && !name.ends_with("_test.go")
                && !name.contains("generated")
                && !name.starts_with("zz_")
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!("no Go types in {}", dir.display()));
    }
    for path in files {
        let mut current: Option<String> = None;
        for line in read(&path)?.lines() {
            if let Some(c) = strukt.captures(line) {
                current = Some(c[1].to_string());
                continue;
            }
            if line.starts_with('}') {
                current = None;
            }
            let Some(s) = &current else { continue };
            if let Some(c) = inline.captures(line) {
                out.push(format!("inline {package}.{s}.{}", &c[2]));
                continue;
            }
            let Some(c) = field.captures(line) else {
                continue;
            };
            let (ptr, ty, json) = (&c[2], &c[3], &c[4]);
            if ty.starts_with("[]") && ty != "[]byte" {
                continue;
            }
            let mut parts = json.split(',');
            let name = parts.next().unwrap_or("");
            if !ptr.is_empty() || !parts.any(|o| o == "omitempty") {
                out.push(format!("keep {package}.{s}.{name}"));
            }
        }
    }
    Ok(())
}
