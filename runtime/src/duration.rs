//! Duration flags: `500ms`, `20s`, `5m`, `1h` or a bare number of seconds.
//!
//! Moved from signal-svc (`config::parse_duration`) and actuator-svc
//! (`config::cli::parse_duration`), which accepted the same texts and worded their refusals
//! differently: [`parse`] says which refusal it is and each service keeps its own words.

use std::time::Duration;

/// Why a text is not a duration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DurationError {
    /// No number before the unit.
    NotANumber,
    /// A unit other than `ms`, `s`, `m`, `h` (the unit as written).
    Unit(String),
    /// A number too large to be finite.
    NotFinite,
}

impl std::fmt::Display for DurationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotANumber => f.write_str("not a number (e.g. 500ms, 20s, 5m)"),
            Self::Unit(unit) => write!(f, "unknown unit {unit:?} (ms, s, m, h)"),
            Self::NotFinite => f.write_str("too large"),
        }
    }
}

impl std::error::Error for DurationError {}

/// Parses `500ms`, `20s`, `5m`, `1h` or a bare number of seconds (surrounding white space
/// ignored, fractions allowed).
pub fn parse(s: &str) -> Result<Duration, DurationError> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = num.parse().map_err(|_| DurationError::NotANumber)?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        other => return Err(DurationError::Unit(other.to_owned())),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(DurationError::NotFinite);
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Both services' tests, moved.
    #[test]
    fn durations() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse("20s"), Ok(Duration::from_secs(20)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse(" 1.5s "), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("soon"), Err(DurationError::NotANumber));
        assert_eq!(parse(""), Err(DurationError::NotANumber));
        assert_eq!(parse("-1s"), Err(DurationError::NotANumber));
        assert_eq!(parse("5d"), Err(DurationError::Unit("d".into())));
        assert_eq!(
            parse("5 parsecs"),
            Err(DurationError::Unit(" parsecs".into()))
        );
        let huge = format!("1{}", "0".repeat(400));
        assert_eq!(parse(&huge), Err(DurationError::NotFinite));
    }
}
