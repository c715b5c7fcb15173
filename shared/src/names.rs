//! Names as the API server checks them.

/// An RFC 1123 subdomain: at most 253 characters, dot-separated parts of lowercase
/// letters, digits and `-`, each starting and ending with a letter or digit.
pub(crate) fn is_dns_subdomain(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 253
        && value.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}
