//! The release in one place: the image `install` deploys by default is the one
//! scripts/image-ref.sh names for the workflows; the krew-release-bot template renders to
//! krew/mcsched.yaml; the image `make image` built is configured as the Dockerfile says.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail, ensure};
use mcsched_e2e::repo_root;
use mcsched_shared::manifests;

fn read(path: &str) -> anyhow::Result<String> {
    std::fs::read_to_string(repo_root().join(path)).with_context(|| format!("cannot read {path}"))
}

fn image_ref(arg: Option<&str>) -> anyhow::Result<String> {
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/image-ref.sh"))
        .args(arg)
        .output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
}

#[test]
fn the_default_image_and_the_release_tag_come_from_one_place() -> anyhow::Result<()> {
    assert_eq!(image_ref(None)?, manifests::default_image());
    assert_eq!(image_ref(Some("--version"))?, env!("CARGO_PKG_VERSION"));
    // The workflows ask the script; none spells the image or the version itself.
    for workflow in [".github/workflows/release.yml", ".github/workflows/ci.yml"] {
        let text = read(workflow)?;
        assert!(
            !text.contains(&manifests::default_image()),
            "{workflow} names the image itself"
        );
        assert!(
            !text.contains(mcsched_shared::keys::AGENT_IMAGE_REPOSITORY),
            "{workflow} names the repository itself"
        );
    }
    let release = read(".github/workflows/release.yml")?;
    assert!(
        release.contains("scripts/image-ref.sh --version"),
        "the tag is checked"
    );
    assert!(
        release.contains("scripts/image-ref.sh)"),
        "the image is pushed as image-ref.sh says"
    );
    assert!(read(".github/workflows/ci.yml")?.contains("make test"));
    Ok(())
}

/// .krew.yaml with krew-release-bot's template functions applied for this version (the
/// placeholder sum in place of the released file's) is krew/mcsched.yaml.
#[test]
fn the_krew_release_bot_template_renders_to_the_krew_manifest() -> anyhow::Result<()> {
    let tag = format!("v{}", env!("CARGO_PKG_VERSION"));
    let template = read(".krew.yaml")?;
    let mut rendered = String::new();
    for line in template.lines() {
        let line = line.replace("{{ .TagName }}", &tag);
        if let Some(call) = line.trim().strip_prefix("{{ addURIAndSha \"") {
            let indent = &line[..line.len() - line.trim_start().len()];
            let (uri, rest) = call.split_once('"').context("addURIAndSha without a uri")?;
            ensure!(
                rest.trim() == ".TagName }}",
                "unexpected addURIAndSha call: {line}"
            );
            rendered += &format!(
                "{indent}uri: {uri}\n{indent}sha256: \"{}\"\n",
                "0".repeat(64)
            );
        } else if line.contains("{{") {
            bail!("a template action krew-release-bot's test here does not know: {line}");
        } else {
            rendered += &line;
            rendered.push('\n');
        }
    }
    let from_template: serde_json::Value = mcsched_shared::yaml::from_str(&rendered)?;
    let manifest: serde_json::Value = mcsched_shared::yaml::from_str(&read("krew/mcsched.yaml")?)?;
    assert_eq!(from_template, manifest, ".krew.yaml rendered:\n{rendered}");
    Ok(())
}

/// The instruction `name` of the Dockerfile's last stage, its arguments as one string.
fn dockerfile_instructions(dockerfile: &str, name: &str) -> Vec<String> {
    let last_stage = dockerfile.rsplit("\nFROM ").next().unwrap_or_default();
    let mut joined = Vec::new();
    let mut current = String::new();
    for line in last_stage.lines() {
        if line.trim_start().starts_with('#') {
            continue;
        }
        current += line.trim_end().trim_end_matches('\\');
        current.push(' ');
        if !line.trim_end().ends_with('\\') {
            joined.push(std::mem::take(&mut current));
        }
    }
    joined
        .iter()
        .filter_map(|l| {
            l.trim()
                .strip_prefix(&format!("{name} "))
                .map(|a| a.trim().to_string())
        })
        .collect()
}

/// The image configuration `make image` wrote (manifest.json → config in the archive).
fn built_image_config() -> anyhow::Result<serde_json::Value> {
    let archive = repo_root().join(".build/image/mcsched-agent.tar");
    if !Path::new(&archive).exists() {
        bail!(
            "{} is missing: build it with `make image`",
            archive.display()
        );
    }
    let extract = |member: &str| -> anyhow::Result<Vec<u8>> {
        let out = Command::new("tar")
            .arg("-xOf")
            .arg(&archive)
            .arg(member)
            .output()?;
        ensure!(
            out.status.success(),
            "tar: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(out.stdout)
    };
    let manifest: serde_json::Value = serde_json::from_slice(&extract("manifest.json")?)?;
    let config = manifest[0]["Config"]
        .as_str()
        .context("no Config in manifest.json")?;
    Ok(serde_json::from_slice(&extract(config)?)?)
}

/// The Dockerfile's builder has no Go module cache of ours: it downloads the .proto
/// files of the release mcsched-wire is built against, and must name that release.
#[test]
fn the_dockerfile_fetches_the_api_release_mcsched_wire_reads() -> anyhow::Result<()> {
    let dockerfile = read("Dockerfile")?;
    let args: Vec<&str> = dockerfile
        .lines()
        .filter_map(|l| l.trim().strip_prefix("ARG K8S_API_VERSION="))
        .collect();
    assert_eq!(args, [mcsched_wire::K8S_API_VERSION]);
    // Every use goes through the argument: no release written out beside it.
    let written = dockerfile
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.contains("ARG K8S_API_VERSION="))
        .filter(|l| l.contains(mcsched_wire::K8S_API_VERSION))
        .count();
    assert_eq!(
        written,
        0,
        "a line repeats {}",
        mcsched_wire::K8S_API_VERSION
    );
    assert_eq!(dockerfile.matches("${K8S_API_VERSION}").count(), 4);
    Ok(())
}

#[test]
fn make_image_and_the_dockerfile_build_the_same_image() -> anyhow::Result<()> {
    let dockerfile = read("Dockerfile")?;
    assert!(
        dockerfile
            .contains("bash scripts/image-rootfs.sh target/release/mcsched-agent LICENSE /rootfs")
    );
    assert!(dockerfile.contains("\nFROM scratch\n"));
    assert_eq!(
        dockerfile_instructions(&dockerfile, "COPY"),
        ["--from=builder /rootfs/ /"]
    );

    let config = built_image_config()?;
    let c = &config["config"];
    assert_eq!(
        dockerfile_instructions(&dockerfile, "USER"),
        [c["User"].as_str().unwrap_or_default()]
    );
    assert_eq!(
        dockerfile_instructions(&dockerfile, "WORKDIR"),
        [c["WorkingDir"].as_str().unwrap_or_default()]
    );
    let entrypoint: Vec<String> = serde_json::from_value(c["Entrypoint"].clone())?;
    let docker_entrypoint: Vec<Vec<String>> = dockerfile_instructions(&dockerfile, "ENTRYPOINT")
        .iter()
        .map(|e| serde_json::from_str(e))
        .collect::<Result<_, _>>()?;
    assert_eq!(docker_entrypoint, [entrypoint]);
    let exposed: Vec<String> = c["ExposedPorts"]
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    let docker_exposed: Vec<String> = dockerfile_instructions(&dockerfile, "EXPOSE")
        .iter()
        .map(|p| {
            if p.contains('/') {
                p.clone()
            } else {
                format!("{p}/tcp")
            }
        })
        .collect();
    assert_eq!(docker_exposed, exposed);
    let env: Vec<String> = serde_json::from_value(c["Env"].clone())?;
    let docker_env: Vec<String> = dockerfile_instructions(&dockerfile, "ENV")
        .iter()
        .flat_map(|e| e.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .collect();
    assert_eq!(docker_env, env);
    assert_eq!(c["User"], "65532:65532", "the nonroot user of distroless");
    assert_eq!(config["os"], "linux");
    Ok(())
}
