//! Reaching the agent: through the API server's service proxy (RBAC applies and no
//! port-forward is needed), or at `--agent-url` directly.

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use mcsched_shared::keys;

#[derive(Debug, Clone, clap::Args)]
pub struct AgentArgs {
    /// Namespace the agent is installed in.
    #[arg(long, default_value = keys::SYSTEM_NAMESPACE, value_name = "NAMESPACE")]
    pub agent_namespace: String,
    /// Talk to the agent at this URL instead of through the API server's service proxy.
    #[arg(long, value_name = "URL")]
    pub agent_url: Option<String>,
    /// With --agent-url: accept the agent's self-signed certificate.
    #[arg(long)]
    pub insecure_skip_tls_verify: bool,
}

/// What the agent said: its body, or a refusal (4xx from the agent itself) with the
/// message of its `{"error": ...}` body.
pub enum Answer {
    Body(String),
    Refused { code: u16, message: String },
}

/// `GET path`, or `POST path` with a JSON body.
pub async fn call(
    client: &kube::Client,
    args: &AgentArgs,
    path: &str,
    json_body: Option<Vec<u8>>,
) -> anyhow::Result<Answer> {
    match &args.agent_url {
        Some(url) => direct(url, args.insecure_skip_tls_verify, path, json_body).await,
        None => proxied(client, &args.agent_namespace, path, json_body).await,
    }
}

async fn direct(
    url: &str,
    insecure: bool,
    path: &str,
    json_body: Option<Vec<u8>>,
) -> anyhow::Result<Answer> {
    let http = reqwest::Client::builder()
        .danger_accept_invalid_certs(insecure)
        .build()?;
    let target = format!("{}{path}", url.trim_end_matches('/'));
    let req = match json_body {
        Some(body) => http
            .post(&target)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body),
        None => http.get(&target),
    };
    let resp = req
        .send()
        .await
        .with_context(|| format!("the agent at {url} does not answer"))?;
    let status = resp.status();
    let text = resp.text().await?;
    if status.is_success() {
        Ok(Answer::Body(text))
    } else {
        Ok(Answer::Refused {
            code: status.as_u16(),
            message: error_message(&text),
        })
    }
}

async fn proxied(
    client: &kube::Client,
    namespace: &str,
    path: &str,
    json_body: Option<Vec<u8>>,
) -> anyhow::Result<Answer> {
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    if services.get_opt(keys::AGENT_NAME).await?.is_none() {
        bail!(
            "the mcsched agent is not installed: no Service {namespace}/{} (install it with `kubectl mcsched install`, or pass --agent-url)",
            keys::AGENT_NAME
        );
    }
    let url = format!(
        "/api/v1/namespaces/{namespace}/services/https:{}:{}/proxy{path}",
        keys::AGENT_NAME,
        keys::AGENT_PORT
    );
    let req = match json_body {
        Some(body) => http::Request::post(url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(kube::client::Body::from(body))?,
        None => http::Request::get(url).body(kube::client::Body::empty())?,
    };
    let resp = client
        .send(req)
        .await
        .context("asking the agent through the API server")?;
    let code = resp.status();
    let bytes = resp.into_body().collect_bytes().await?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    if code.is_success() {
        return Ok(Answer::Body(text));
    }
    // A Status object is the API server's own answer (the agent never sends one): no
    // endpoint to proxy to, or RBAC.
    let status = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .filter(|v| v.get("kind").and_then(|k| k.as_str()) == Some("Status"));
    match status {
        Some(s) => {
            let message = s
                .get("message")
                .and_then(|m| m.as_str())
                .unwrap_or_default();
            match code.as_u16() {
                404 | 503 => bail!(
                    "the mcsched agent is not ready (no ready endpoint behind Service {namespace}/{}): {message}",
                    keys::AGENT_NAME
                ),
                403 => bail!("the API server does not let you reach the agent: {message}"),
                c => bail!("the API server answered {c} for the agent: {message}"),
            }
        }
        None => Ok(Answer::Refused {
            code: code.as_u16(),
            message: error_message(&text),
        }),
    }
}

/// The agent answers errors as `{"error": "..."}`; anything else is shown as it came.
fn error_message(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(String::from))
        .unwrap_or_else(|| body.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agents_error_field_is_unwrapped() {
        assert_eq!(
            error_message(r#"{"error":"pod default/x not found"}"#),
            "pod default/x not found"
        );
        assert_eq!(error_message("plain text\n"), "plain text");
    }
}
