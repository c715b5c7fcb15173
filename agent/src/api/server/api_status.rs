//! Errors as a metav1 Status, the body every Kubernetes client expects from an API path.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A failure `Status` with kube's reason for the code.
pub fn failure(code: StatusCode, message: impl Into<String>) -> Response {
    let reason = match code {
        StatusCode::BAD_REQUEST => "BadRequest",
        StatusCode::UNAUTHORIZED => "Unauthorized",
        StatusCode::FORBIDDEN => "Forbidden",
        StatusCode::NOT_FOUND => "NotFound",
        StatusCode::METHOD_NOT_ALLOWED => "MethodNotAllowed",
        StatusCode::NOT_ACCEPTABLE => "NotAcceptable",
        StatusCode::CONFLICT => "Conflict",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "UnsupportedMediaType",
        StatusCode::PAYLOAD_TOO_LARGE => "RequestEntityTooLarge",
        StatusCode::UNPROCESSABLE_ENTITY => "Invalid",
        StatusCode::TOO_MANY_REQUESTS => "TooManyRequests",
        StatusCode::GATEWAY_TIMEOUT => "Timeout",
        StatusCode::SERVICE_UNAVAILABLE => "ServiceUnavailable",
        _ => "InternalError",
    };
    let body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message.into(),
        "reason": reason,
        "code": code.as_u16(),
    });
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// 429 with the Retry-After header kube's max-in-flight filter sends.
pub fn too_many_requests(message: impl Into<String>, retry_after_seconds: u64) -> Response {
    let mut resp = failure(StatusCode::TOO_MANY_REQUESTS, message);
    if let Ok(v) = header::HeaderValue::from_str(&retry_after_seconds.to_string()) {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

pub fn json_ok(code: StatusCode, body: &impl serde::Serialize) -> Response {
    match serde_json::to_string(body) {
        Ok(text) => (code, [(header::CONTENT_TYPE, "application/json")], text).into_response(),
        Err(e) => failure(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the answer: {e}"),
        ),
    }
}
