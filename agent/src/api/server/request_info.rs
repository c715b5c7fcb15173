//! What a request asks for, in authorization terms: kube's RequestInfo, for the paths
//! this server has (its own API group's resources, and non-resource paths).

use axum::http::{Method, Uri};
use mcsched_shared::keys;

use super::authz::Attributes;

fn verb_for(method: &Method, named: bool, watch: bool) -> String {
    match *method {
        Method::GET | Method::HEAD if watch => "watch",
        Method::GET | Method::HEAD if named => "get",
        Method::GET | Method::HEAD => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => return method.as_str().to_lowercase(),
    }
    .to_string()
}

/// A path segment as the handlers' `Path` extractor reads it: percent-decoded, so that
/// what is authorized is the name that is served (`w%65b` is `web`).
fn decoded(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8_lossy()
        .into_owned()
}

/// `/apis/mcsched.io/v1alpha1/[namespaces/{ns}/]{resource}[/{name}]` is a resource
/// request; anything else is a non-resource path with the method as its verb. The
/// segments are split on the path as sent, then decoded one by one, as the router
/// matches them.
pub fn attributes(method: &Method, uri: &Uri) -> Attributes {
    let path = uri.path();
    let prefix = format!("/apis/{}/", keys::API_GROUP_VERSION);
    let non_resource = || Attributes::NonResource {
        path: path.to_string(),
        verb: method.as_str().to_lowercase(),
    };
    let Some(rest) = path.strip_prefix(&prefix) else {
        return non_resource();
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let (namespace, rest) = match parts.as_slice() {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(decoded(ns)), rest),
        other => (None, other),
    };
    let (resource, name) = match rest {
        [resource] if !resource.is_empty() => (decoded(resource), None),
        [resource, name] if !resource.is_empty() && !name.is_empty() => {
            (decoded(resource), Some(decoded(name)))
        }
        _ => return non_resource(),
    };
    let watch = uri
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    Attributes::Resource {
        verb: verb_for(method, name.is_some(), watch),
        group: keys::API_GROUP.into(),
        version: keys::API_VERSION.into(),
        resource,
        namespace,
        name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(method: Method, uri: &str) -> Attributes {
        attributes(&method, &uri.parse().unwrap())
    }

    fn resource(verb: &str, resource: &str, ns: Option<&str>, name: Option<&str>) -> Attributes {
        Attributes::Resource {
            verb: verb.into(),
            group: "mcsched.io".into(),
            version: "v1alpha1".into(),
            resource: resource.into(),
            namespace: ns.map(String::from),
            name: name.map(String::from),
        }
    }

    #[test]
    fn resource_requests() {
        assert_eq!(
            attrs(
                Method::GET,
                "/apis/mcsched.io/v1alpha1/namespaces/a/explanations/web"
            ),
            resource("get", "explanations", Some("a"), Some("web"))
        );
        assert_eq!(
            attrs(
                Method::GET,
                "/apis/mcsched.io/v1alpha1/namespaces/a/explanations"
            ),
            resource("list", "explanations", Some("a"), None)
        );
        assert_eq!(
            attrs(
                Method::GET,
                "/apis/mcsched.io/v1alpha1/explanations?watch=true"
            ),
            resource("watch", "explanations", None, None)
        );
        assert_eq!(
            attrs(
                Method::POST,
                "/apis/mcsched.io/v1alpha1/namespaces/a/whatifs"
            ),
            resource("create", "whatifs", Some("a"), None)
        );
        assert_eq!(
            attrs(
                Method::DELETE,
                "/apis/mcsched.io/v1alpha1/namespaces/a/explanations/web"
            ),
            resource("delete", "explanations", Some("a"), Some("web"))
        );
    }

    #[test]
    fn percent_encoded_segments_are_authorized_as_the_handler_reads_them() {
        assert_eq!(
            attrs(
                Method::GET,
                "/apis/mcsched.io/v1alpha1/namespaces/te%61m-a/explanations/w%65b"
            ),
            resource("get", "explanations", Some("team-a"), Some("web"))
        );
        assert_eq!(
            attrs(
                Method::DELETE,
                "/apis/mcsched.io/v1alpha1/namespaces/a/expl%61nations/x%2Fy"
            ),
            resource("delete", "explanations", Some("a"), Some("x/y"))
        );
    }

    #[test]
    fn non_resource_requests() {
        for path in [
            "/metrics",
            "/apis",
            "/apis/mcsched.io",
            "/apis/mcsched.io/v1alpha1",
            "/apis/mcsched.io/v1alpha1/",
        ] {
            assert_eq!(
                attrs(Method::GET, path),
                Attributes::NonResource {
                    path: path.into(),
                    verb: "get".into()
                },
                "{path}"
            );
        }
    }
}
