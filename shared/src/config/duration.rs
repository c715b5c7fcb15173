//! Go `time.Duration` strings as metav1.Duration writes them: "15s", "1m30s", "500ms".

use std::time::Duration;

/// The longest Go duration, in seconds (i64::MAX nanoseconds).
const MAX_SECONDS: f64 = 9_223_372_036.854_775;

/// Why a text is no Go duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("empty duration")]
    Empty,
    #[error("missing unit in duration {0:?}")]
    MissingUnit(String),
    #[error("invalid duration {0:?}")]
    Invalid(String),
    #[error("unknown unit {unit:?} in duration {text:?}")]
    UnknownUnit { unit: String, text: String },
    #[error("duration {0:?} is out of range (at most 2562047h47m16s)")]
    OutOfRange(String),
}

pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let s = text.trim();
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| DurationError::MissingUnit(text.to_string()))?;
        let (num, tail) = rest.split_at(num_end);
        let value: f64 = num
            .parse()
            .map_err(|_| DurationError::Invalid(text.to_string()))?;
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_end);
        let secs = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => {
                return Err(DurationError::UnknownUnit {
                    unit: unit.to_string(),
                    text: text.to_string(),
                });
            }
        };
        total += value * secs;
        rest = next;
    }
    // Go's durations are int64 nanoseconds; larger ones are refused there, and would
    // overflow here.
    if !total.is_finite() || total > MAX_SECONDS {
        return Err(DurationError::OutOfRange(text.to_string()));
    }
    Ok(Duration::from_secs_f64(total))
}

pub(crate) fn format(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs.fract() == 0.0 {
        let s = d.as_secs();
        if s >= 60 && s.is_multiple_of(60) {
            return format!("{}m", s / 60);
        }
        return format!("{s}s");
    }
    format!("{}ms", d.as_millis())
}

/// Go's `time.Duration.String()`: "0s", "1.5s", "1m30s", "1h0m0s", "500ms", "2µs".
pub fn go_string(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    if ns < 1_000_000_000 {
        let (unit, div) = match ns {
            n if n < 1_000 => ("ns", 1),
            n if n < 1_000_000 => ("µs", 1_000),
            _ => ("ms", 1_000_000),
        };
        return format!("{}{unit}", decimal(ns, div));
    }
    let secs = ns / 1_000_000_000;
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let s = decimal(s * 1_000_000_000 + ns % 1_000_000_000, 1_000_000_000);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, m) => format!("{m}m{s}s"),
        (h, m) => format!("{h}h{m}m{s}s"),
    }
}

/// `n / div` with the remainder as a decimal fraction, trailing zeros dropped.
fn decimal(n: u128, div: u128) -> String {
    let (whole, frac) = (n / div, n % div);
    if frac == 0 {
        return whole.to_string();
    }
    let width = div.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("15"), Err(DurationError::MissingUnit("15".into())));
        assert_eq!(
            parse("15x").map_err(|e| e.to_string()),
            Err(r#"unknown unit "x" in duration "15x""#.into())
        );
        assert_eq!(parse(""), Err(DurationError::Empty));
        // Out of range is an error, not a panic.
        assert!(matches!(
            parse("9999999999999999999999h"),
            Err(DurationError::OutOfRange(_))
        ));
        assert!(parse(&format!("{}s", "9".repeat(400))).is_err());
        assert!(parse("2562047h").is_ok());
        assert_eq!(format(Duration::from_secs(15)), "15s");
        assert_eq!(format(Duration::from_secs(120)), "2m");
    }

    #[test]
    fn go_duration_strings() {
        for (d, want) in [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(15), "15ns"),
            (Duration::from_micros(2), "2µs"),
            (Duration::from_micros(1500), "1.5ms"),
            (Duration::from_millis(500), "500ms"),
            (Duration::from_secs(1), "1s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(120), "2m0s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_secs(15 * 60), "15m0s"),
            (Duration::from_millis(3_661_001), "1h1m1.001s"),
        ] {
            assert_eq!(go_string(d), want, "{d:?}");
        }
    }
}
