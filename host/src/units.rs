//! Quantities as people type them on a command line.

use std::time::Duration;

/// `2`, `0.5`, `2s`, `1.5s`, `500ms`, `100us`, `5m` (or `5min`), `1h`: at least a
/// microsecond, at most a day.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix("min") {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (examples: 2, 0.5, 2s, 500ms, 5m, 1h)"))?;
    let secs = v * scale;
    // At least a microsecond: below it the value would become 0 ns and a run of
    // nothing would pass for a measurement.
    if !(1e-6..=86_400.0).contains(&secs) {
        return Err(format!(
            "`{s}`: a duration must be at least 1us and at most a day"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_and_without_units() {
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("2min").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("24h").unwrap(), Duration::from_secs(86_400));
        assert!(parse_duration("25h").unwrap_err().contains("at most a day"));
        for bad in ["", "x", "0", "-1s", "nan", "1e9"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }
}
