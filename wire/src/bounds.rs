//! The limits the API server's validation puts on an object's labels and annotations
//! (k8s.io/apimachinery's `ValidateObjectMeta`: `ValidateLabels`, `ValidateAnnotations`),
//! held to again as objects are decoded. An API server never stores an object past them,
//! so nothing it serves is refused; what is refused is a server, proxy or etcd write that
//! went around validation, before the agent spends time and memory on it. Only lengths
//! are checked, not characters: lengths are what bound the work, and a character rule a
//! later release relaxes must not make the agent refuse what that release accepts.
//!
//! Labels have no bound on their number, in the API server as here: 140k short labels fit
//! the 1.5 MiB etcd request limit and are valid, which is why maps are deduplicated by a
//! sort when they are decoded, not by a search per entry.

/// `IsLabelKey`: the part after the `/`.
pub const KEY_NAME_MAX: usize = 63;
/// `IsLabelKey`: the optional DNS subdomain before the `/` (`DNS1123SubdomainMaxLength`).
pub const KEY_PREFIX_MAX: usize = 253;
/// `IsLabelValue` (`LabelValueMaxLength`).
pub const LABEL_VALUE_MAX: usize = 63;
/// `TotalAnnotationSizeLimitB`: every annotation's key and value bytes, summed.
pub const ANNOTATIONS_TOTAL_MAX: usize = 256 << 10;

/// How much of a refused key an error shows: keys can be megabytes long.
const SHOWN: usize = 64;

/// An object's metadata past what the API server lets it store, by field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Bound {
    #[error("metadata.{field}: key {key:?} {why}")]
    Key {
        field: &'static str,
        key: String,
        why: KeyProblem,
    },
    #[error(
        "metadata.labels: the value of {key:?} is {len} bytes, more than the API server's {LABEL_VALUE_MAX}"
    )]
    LabelValue { key: String, len: usize },
    #[error(
        "metadata.annotations: {total} bytes of keys and values, more than the API server's {ANNOTATIONS_TOTAL_MAX} (TotalAnnotationSizeLimitB)"
    )]
    AnnotationsTotal { total: usize },
}

/// What is wrong with a label or annotation key's shape (`IsLabelKey`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyProblem {
    #[error("has more than one '/'")]
    Slashes,
    #[error("has an empty prefix before its '/'")]
    EmptyPrefix,
    #[error("has a {0}-byte prefix, more than the API server's {KEY_PREFIX_MAX}")]
    LongPrefix(usize),
    #[error("has an empty name")]
    EmptyName,
    #[error("has a {0}-byte name, more than the API server's {KEY_NAME_MAX}")]
    LongName(usize),
}

/// The start of a key, for an error message.
fn shown(key: &[u8]) -> String {
    let text = String::from_utf8_lossy(key);
    if text.chars().count() <= SHOWN {
        return text.into_owned();
    }
    let head: String = text.chars().take(SHOWN).collect();
    format!("{head}… ({} bytes)", key.len())
}

fn key_shape(key: &[u8]) -> Result<(), KeyProblem> {
    let mut parts = key.splitn(3, |b| *b == b'/');
    let first = parts.next().unwrap_or_default();
    let (prefix, name) = match (parts.next(), parts.next()) {
        (None, _) => (None, first),
        (Some(name), None) => (Some(first), name),
        (Some(_), Some(_)) => return Err(KeyProblem::Slashes),
    };
    match prefix {
        Some([]) => return Err(KeyProblem::EmptyPrefix),
        Some(p) if p.len() > KEY_PREFIX_MAX => return Err(KeyProblem::LongPrefix(p.len())),
        _ => {}
    }
    match name.len() {
        0 => Err(KeyProblem::EmptyName),
        n if n > KEY_NAME_MAX => Err(KeyProblem::LongName(n)),
        _ => Ok(()),
    }
}

fn key(field: &'static str, key: &[u8]) -> Result<(), Bound> {
    key_shape(key).map_err(|why| Bound::Key {
        field,
        key: shown(key),
        why,
    })
}

/// ObjectMeta's map `field` (its JSON name), each key once as the decoded map has it; the
/// fields without a bound pass.
pub(crate) fn check<'a>(
    field: &str,
    entries: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
) -> Result<(), Bound> {
    match field {
        "labels" => {
            for (k, v) in entries {
                key("labels", k)?;
                if v.len() > LABEL_VALUE_MAX {
                    return Err(Bound::LabelValue {
                        key: shown(k),
                        len: v.len(),
                    });
                }
            }
            Ok(())
        }
        "annotations" => {
            let mut total = 0usize;
            for (k, v) in entries {
                key("annotations", k)?;
                total = total.saturating_add(k.len()).saturating_add(v.len());
            }
            if total > ANNOTATIONS_TOTAL_MAX {
                return Err(Bound::AnnotationsTotal { total });
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_held_to_is_label_key_lengths() {
        let ok: &[&[u8]] = &[
            b"a",
            b"app.kubernetes.io/name",
            &[b'n'; KEY_NAME_MAX],
            &[&[b'p'; KEY_PREFIX_MAX][..], b"/", &[b'n'; KEY_NAME_MAX]].concat(),
        ];
        for k in ok {
            assert_eq!(key_shape(k), Ok(()), "{}", String::from_utf8_lossy(k));
        }
        assert_eq!(key_shape(b""), Err(KeyProblem::EmptyName));
        assert_eq!(key_shape(b"a/"), Err(KeyProblem::EmptyName));
        assert_eq!(key_shape(b"/a"), Err(KeyProblem::EmptyPrefix));
        assert_eq!(key_shape(b"a/b/c"), Err(KeyProblem::Slashes));
        assert_eq!(
            key_shape(&[b'n'; KEY_NAME_MAX + 1]),
            Err(KeyProblem::LongName(KEY_NAME_MAX + 1))
        );
        let long_prefix = [&[b'p'; KEY_PREFIX_MAX + 1][..], b"/n"].concat();
        assert_eq!(
            key_shape(&long_prefix),
            Err(KeyProblem::LongPrefix(KEY_PREFIX_MAX + 1))
        );
    }

    #[test]
    fn annotations_are_held_to_their_total_and_labels_to_their_values() {
        let big = vec![b'v'; ANNOTATIONS_TOTAL_MAX - 1];
        assert_eq!(check("annotations", [(&b"k"[..], &big[..])]), Ok(()));
        let over = vec![b'v'; ANNOTATIONS_TOTAL_MAX];
        assert_eq!(
            check("annotations", [(&b"k"[..], &over[..])]),
            Err(Bound::AnnotationsTotal {
                total: ANNOTATIONS_TOTAL_MAX + 1
            })
        );
        let value = [b'v'; LABEL_VALUE_MAX + 1];
        let e = check("labels", [(&b"k"[..], &value[..])]).expect_err("too long");
        assert_eq!(
            e.to_string(),
            "metadata.labels: the value of \"k\" is 64 bytes, more than the API server's 63"
        );
        // A long value is no label's problem elsewhere: nodeSelector has no bound.
        assert_eq!(check("nodeSelector", [(&b"k"[..], &value[..])]), Ok(()));
        let long_key = vec![b'k'; 1 << 20];
        let shown = check("annotations", [(&long_key[..], &b""[..])])
            .expect_err("too long")
            .to_string();
        assert!(shown.len() < 200, "a refused key is cut short: {shown}");
        assert!(
            shown.starts_with("metadata.annotations: key \"kkk"),
            "{shown}"
        );
    }
}
