//! Durations as kubectl writes them: `90s`, `5m`, `1h30m`, `500ms`.

use std::time::Duration;

/// Parses a Go-style duration (units ms, s, m, h; several may follow each other).
pub fn parse(text: &str) -> Result<Duration, String> {
    let err = || format!("{text:?} is not a duration (examples: 30s, 5m, 1h30m)");
    if text.is_empty() {
        return Err(err());
    }
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .ok_or_else(err)?;
        let value: f64 = rest[..digits].parse().map_err(|_| err())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ms" => value / 1000.0,
            "s" => value,
            "m" => value * 60.0,
            "h" => value * 3600.0,
            _ => return Err(err()),
        };
        total += Duration::from_secs_f64(seconds);
        rest = &rest[unit_len..];
    }
    Ok(total)
}

/// `5m0s` style back again, for messages.
pub fn display(d: Duration) -> String {
    let secs = d.as_secs();
    if d.subsec_millis() != 0 && secs < 60 {
        return format!("{}ms", d.as_millis());
    }
    match (secs / 3600, (secs % 3600) / 60, secs % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, m, s) => format!("{h}h{m}m{s}s"),
    }
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
        assert!(parse("5").is_err());
        assert!(parse("5 minutes").is_err());
        assert!(parse("").is_err());
        assert_eq!(display(Duration::from_secs(300)), "5m0s");
        assert_eq!(display(Duration::from_secs(3)), "3s");
        assert_eq!(display(Duration::from_millis(1500)), "1500ms");
    }
}
