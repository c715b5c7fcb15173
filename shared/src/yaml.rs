//! YAML in and out, for every crate of the workspace: serde-saphyr (serde_yaml is
//! deprecated upstream; kube-client already builds serde-saphyr, whose parser also caps
//! what a document may expand to). Errors read as serde_yaml's did: the field path, then
//! what is wrong and where, `profiles[0]: unknown field `bogus`, expected one of
//! schedulerName, pluginConfig at line 4, column 3`.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// A document that does not parse or does not fit its type, or a value that cannot be
/// written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", path.as_deref().map(|p| format!("{p}: ")).unwrap_or_default())]
pub struct YamlError {
    /// The field the error is about (`profiles[0].schedulerName`), None at the top.
    pub path: Option<String>,
    /// What is wrong, with the line and column where the text tells them.
    pub message: String,
}

impl YamlError {
    fn other(e: impl std::fmt::Display) -> Self {
        YamlError {
            path: None,
            message: e.to_string(),
        }
    }
}

/// The messages as one line, `at line L, column C` last: no source snippet (callers
/// print the error inside messages of their own).
fn options() -> serde_saphyr::options::Options {
    let mut o = serde_saphyr::options::Options::default();
    o.with_snippet = false;
    o
}

/// serde_yaml's path: an unknown field is named by the mapping it is in (the path
/// serde_path_to_error gives ends in the unknown key itself).
fn path_of<E: std::fmt::Display>(e: &serde_path_to_error::Error<E>) -> Option<String> {
    use serde_path_to_error::Segment;
    let mut segments: Vec<&Segment> = e.path().iter().collect();
    if e.inner().to_string().starts_with("unknown field")
        && matches!(segments.last(), Some(Segment::Map { .. }))
    {
        segments.pop();
    }
    let mut out = String::new();
    for s in segments {
        match s {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Enum { variant } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(variant);
            }
            Segment::Unknown => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push('?');
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

/// One document into `T`.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    let mut path = None;
    serde_saphyr::with_deserializer_from_str_with_options(text, options(), |de| {
        serde_path_to_error::deserialize::<_, T>(de).map_err(|e| {
            path = path_of(&e);
            e.into_inner()
        })
    })
    .map_err(|e| YamlError {
        path,
        message: e.to_string(),
    })
}

/// As [`from_str`], from bytes that must be UTF-8.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, YamlError> {
    from_str(std::str::from_utf8(bytes).map_err(YamlError::other)?)
}

/// Every document of a stream (`---` between them); empty ones are left out.
pub fn from_multiple(text: &str) -> Result<Vec<serde_json::Value>, YamlError> {
    serde_saphyr::from_multiple_with_options(text, options()).map_err(YamlError::other)
}

/// A value already parsed (plugin arguments, a document of a stream) into `T`, the path
/// named from the value's top.
pub fn from_value<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, YamlError> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| YamlError {
        path: path_of(&e),
        message: e.into_inner().to_string(),
    })
}

/// `value` as a YAML document. Long one-line strings (CRD descriptions) stay on their
/// line, as kubectl and serde_yaml write them, rather than folded at 80 columns;
/// multi-line ones are literal blocks (`|`).
pub fn to_string<T: Serialize>(value: &T) -> Result<String, YamlError> {
    let mut o = serde_saphyr::SerializerOptions::default();
    o.folded_wrap_chars = usize::MAX;
    serde_saphyr::to_string_with_options(value, o).map_err(YamlError::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize, Serialize, PartialEq)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    struct Doc {
        #[serde(default)]
        profiles: Vec<Profile>,
        parallelism: Option<i64>,
    }

    #[derive(Debug, serde::Deserialize, Serialize, PartialEq)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    struct Profile {
        scheduler_name: Option<String>,
    }

    fn err(text: &str) -> String {
        match from_str::<Doc>(text) {
            Ok(d) => panic!("{text:?} parsed: {d:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn errors_name_the_field_then_the_line_and_column() {
        assert_eq!(
            err("profiles:\n- schedulerName: a\n  bogus: 1\n"),
            "profiles[0]: unknown field `bogus`, expected one of schedulerName at line 3, column 3"
        );
        assert_eq!(
            err("profiles:\n  - schedulerName: [\n"),
            "profiles[0].schedulerName: expected string scalar at line 2, column 20"
        );
        assert_eq!(
            err("parallelism: abc\n"),
            "parallelism: invalid i64 at line 1, column 14"
        );
        let e = err("profiles: [\n");
        assert!(e.contains("line 1, column 11"), "{e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }

    #[test]
    fn values_name_their_fields_too() {
        let v = serde_json::json!({"profiles": [{"schedulerName": 3}]});
        let e = from_value::<Doc>(v).expect_err("a number is no name");
        assert_eq!(e.path.as_deref(), Some("profiles[0].schedulerName"));
        let e = from_value::<Doc>(serde_json::json!({"bogus": 1})).expect_err("unknown");
        assert_eq!(e.path, None);
        assert!(e.message.starts_with("unknown field `bogus`"), "{e}");
    }

    #[test]
    fn round_trips_and_streams() {
        let d = Doc {
            profiles: vec![Profile {
                scheduler_name: Some("yes".into()),
            }],
            parallelism: Some(16),
        };
        let text = to_string(&d).expect("written");
        assert_eq!(from_str::<Doc>(&text).expect("read"), d, "{text}");
        let docs = from_multiple("a: 1\n---\n---\nb: [x]\n").expect("stream");
        assert_eq!(
            docs,
            [serde_json::json!({"a": 1}), serde_json::json!({"b": ["x"]})]
        );
    }
}
