//! Durations on the command line, as kubectl takes them (`90s`, `5m`, `1h30m`, `500ms`):
//! the configuration's Go duration parser, with an example in the error.

use std::time::Duration;

use mcsched_shared::config::duration::{self, DurationError};

/// A duration flag's value that is no duration: the parser's words and examples.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0} (examples: 30s, 5m, 1h30m)")]
pub struct DurationArgError(#[from] DurationError);

pub fn parse(text: &str) -> Result<Duration, DurationArgError> {
    Ok(duration::parse(text)?)
}

/// Go's `time.Duration.String()`, as kubectl prints durations.
pub fn display(d: Duration) -> String {
    duration::go_string(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_durations() {
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("2.5s"), Ok(Duration::from_millis(2500)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        let err = parse("5").expect_err("no unit");
        assert_eq!(
            err,
            DurationArgError(DurationError::MissingUnit("5".into()))
        );
        assert!(err.to_string().contains("examples: 30s"), "{err}");
        assert!(parse("5 minutes").is_err());
        assert!(parse("").is_err());
        assert_eq!(display(Duration::from_secs(300)), "5m0s");
        assert_eq!(display(Duration::from_secs(3)), "3s");
        assert_eq!(display(Duration::from_millis(1500)), "1.5s");
    }
}
