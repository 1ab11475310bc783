//! The small parsers behind the classifier: numbers, Go durations,
//! `retry-after` values, RFC 3339 and HTTP-dates, and waits written in prose.
//!
//! Every function takes untrusted text and returns `None` rather than guess:
//! negative values, NaN, infinities and garbage are ignored, and values too
//! large for a `u64` saturate. Nothing here reads a clock; absolute times are
//! turned into waits against the `now_unix_ms` the caller passes in, and a time
//! already past is a wait of 0.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

const NS_PER_MS: u128 = 1_000_000;

/// A count from a header or body: a non-negative integer, or a non-negative
/// decimal (floored). Digits beyond `u64` saturate; signs, exponents, NaN and
/// anything else are ignored.
pub(crate) fn parse_count(text: &str) -> Option<u64> {
    let text = text.trim();
    let (int, frac) = split_decimal(text)?;
    if !frac.is_empty() && !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(saturating_digits(int))
}

/// Splits `12.5` into (`12`, `5`); rejects empty integer parts and non-digits.
fn split_decimal(text: &str) -> Option<(&str, &str)> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    if int.is_empty() || !int.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((int, frac))
}

/// The value of a run of ASCII digits, saturating at `u64::MAX`.
fn saturating_digits(digits: &str) -> u64 {
    digits.bytes().fold(0u64, |acc, b| acc.saturating_mul(10).saturating_add(u64::from(b - b'0')))
}

/// `int.frac` units of `unit_ns` nanoseconds, in nanoseconds (saturating).
fn decimal_ns(int: &str, frac: &str, unit_ns: u128) -> u128 {
    let whole = u128::from(saturating_digits(int)).saturating_mul(unit_ns);
    // Nine fractional digits cover nanoseconds of a second; more cannot matter.
    let mut part = 0u128;
    let mut scale = unit_ns;
    for b in frac.bytes().take(18) {
        scale /= 10;
        part = part.saturating_add(u128::from(b - b'0').saturating_mul(scale));
    }
    whole.saturating_add(part)
}

/// Nanoseconds to whole milliseconds, rounded up so a wait is never cut
/// short, saturating at `u64::MAX`.
fn ns_to_ms(ns: u128) -> u64 {
    u64::try_from(ns.div_ceil(NS_PER_MS)).unwrap_or(u64::MAX)
}

/// A duration as Go prints it (`12ms`, `1s`, `6m0s`, `1m51.535s`,
/// `24h6m34s`, `500us`), in milliseconds rounded up. A bare `0` is zero, as
/// in Go. Negative durations and unknown units are ignored.
pub(crate) fn parse_go_duration(text: &str) -> Option<u64> {
    let mut rest = text.trim();
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest.bytes().take_while(|b| b.is_ascii_digit() || *b == b'.').count();
        let (number, tail) = rest.split_at(number_len);
        let unit_len = tail.bytes().take_while(|b| !b.is_ascii_digit() && *b != b'.').count();
        let (unit, tail) = tail.split_at(unit_len);
        let unit_ns: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        let (int, frac) = split_decimal(number)?;
        if !frac.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        total = total.saturating_add(decimal_ns(int, frac, unit_ns));
        rest = tail;
    }
    Some(ns_to_ms(total))
}

/// Seconds, possibly fractional (`30`, `1.5`), in milliseconds rounded up.
pub(crate) fn parse_seconds(text: &str) -> Option<u64> {
    let (int, frac) = split_decimal(text.trim())?;
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(ns_to_ms(decimal_ns(int, frac, 1_000_000_000)))
}

/// Milliseconds, possibly fractional (`retry-after-ms: 1500.5`), rounded up.
pub(crate) fn parse_millis(text: &str) -> Option<u64> {
    let (int, frac) = split_decimal(text.trim())?;
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(ns_to_ms(decimal_ns(int, frac, NS_PER_MS)))
}

/// A `retry-after` value: delay-seconds (fractional accepted, as the OpenAI
/// SDKs do) or an HTTP-date, as a wait in milliseconds from `now_unix_ms`.
pub(crate) fn parse_retry_after(text: &str, now_unix_ms: u64) -> Option<u64> {
    let text = text.trim();
    if let Some(ms) = parse_seconds(text) {
        return Some(ms);
    }
    let at = httpdate::parse_http_date(text).ok()?;
    Some(wait_until(at, now_unix_ms))
}

/// An RFC 3339 timestamp (`2026-01-01T00:00:30Z`, as Anthropic sends, or
/// with a numeric offset, `2026-01-01T01:00:30+01:00`) as a wait in
/// milliseconds from `now_unix_ms`; 0 when it is already past. `T` and `Z`
/// may be lowercase, as RFC 3339 allows; a time with no offset at all is read
/// as UTC. Local years outside 1970..=9999 are ignored.
pub(crate) fn parse_rfc3339_wait(text: &str, now_unix_ms: u64) -> Option<u64> {
    // humantime reads UTC only, and only uppercase, and none of chrono, time
    // or jiff is in the dependency tree: read the offset here, and hand
    // humantime the local time as if it were UTC.
    let text = text.trim().to_ascii_uppercase();
    let (local, offset_s) = split_offset(&text)?;
    let local = humantime::parse_rfc3339_weak(local).ok()?;
    // local = UTC + offset, so UTC = local - offset.
    let offset = Duration::from_secs(offset_s.unsigned_abs());
    let at = if offset_s >= 0 { local.checked_sub(offset) } else { local.checked_add(offset) }?;
    Some(wait_until(at, now_unix_ms))
}

/// Splits an RFC 3339 time into its local part and its offset from UTC in
/// seconds: `Z` (or `+00:00`, or `-00:00`, "offset unknown") is 0, `±HH:MM`
/// is read, and no offset is 0. `None` for an offset out of range.
fn split_offset(text: &str) -> Option<(&str, i64)> {
    if let Some(local) = text.strip_suffix('Z') {
        return Some((local, 0));
    }
    // `±HH:MM` is the last six bytes; the date's own `-`s are earlier (a
    // full date and time is at least 19 bytes).
    let Some(at) = text.len().checked_sub(6).filter(|&at| at >= 19) else {
        return Some((text, 0));
    };
    // Checked before splitting: an ASCII sign is a char boundary.
    let sign = match text.as_bytes()[at] {
        b'+' => 1,
        b'-' => -1,
        _ => return Some((text, 0)),
    };
    let (local, offset) = text.split_at(at);
    let (hours, minutes) = offset[1..].split_once(':')?;
    let digits =
        |part: &str| (part.len() == 2 && part.bytes().all(|b| b.is_ascii_digit())).then(|| saturating_digits(part));
    let (hours, minutes) = (digits(hours)?, digits(minutes)?);
    if hours > 23 || minutes > 59 {
        return None;
    }
    Some((local, sign * (hours * 3600 + minutes * 60) as i64))
}

/// The wait until `at`, saturating at 0 for the past.
fn wait_until(at: SystemTime, now_unix_ms: u64) -> u64 {
    // A time before 1970 is past by any clock.
    let at_ms = at.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    at_ms.saturating_sub(now_unix_ms)
}

/// A reset written as a Go duration, or bare seconds (Azure sends `60`).
pub(crate) fn parse_relative_reset(text: &str) -> Option<u64> {
    parse_go_duration(text).or_else(|| parse_seconds(text))
}

/// A reset whose form varies by provider (`x-ratelimit-reset`): epoch
/// milliseconds (OpenRouter), epoch seconds, relative seconds, a Go duration
/// or RFC 3339. Numbers are told apart by size: anything past 10^12 is epoch
/// milliseconds (after 2001-09-09), past 10^9 epoch seconds (likewise), and
/// smaller ones are seconds from now (no window is 31 years long).
pub(crate) fn parse_any_reset(text: &str, now_unix_ms: u64) -> Option<u64> {
    let text = text.trim();
    if let Some(n) = parse_count(text) {
        return Some(match n {
            // Read again with the fraction, rounded up: `n` is floored.
            n if n >= 1_000_000_000_000 => parse_millis(text)?.saturating_sub(now_unix_ms),
            n if n >= 1_000_000_000 => parse_seconds(text)?.saturating_sub(now_unix_ms),
            _ => parse_seconds(text)?,
        });
    }
    parse_go_duration(text).or_else(|| parse_rfc3339_wait(text, now_unix_ms))
}

/// A wait written in an error message: `Please retry after 86400 seconds`
/// (Azure), `Please try again in 1.2s` / `in 6m0s` (OpenAI, Groq),
/// `Please retry in 47.434392449s` (Gemini), `Try again in 30 seconds`.
/// `lower` must already be lowercase.
pub(crate) fn wait_in_text(lower: &str) -> Option<u64> {
    const CUES: [&str; 4] = ["retry after ", "try again in ", "retry in ", "try again after "];
    CUES.iter().find_map(|cue| {
        let start = lower.find(cue)? + cue.len();
        let rest = lower.get(start..)?;
        wait_after_cue(rest)
    })
}

/// Parses `86400 seconds`, `1.2s.`, `6m0s`, `500 ms` at the start of `rest`.
fn wait_after_cue(rest: &str) -> Option<u64> {
    let mut words = rest.split_whitespace();
    let first = words.next()?.trim_end_matches(['.', ',', ';', ')']);
    if let Some(ms) = parse_go_duration(first) {
        return Some(ms);
    }
    let unit = words.next().unwrap_or("seconds").trim_end_matches(['.', ',', ';', ')']);
    match unit {
        "ms" | "millisecond" | "milliseconds" => parse_millis(first),
        "s" | "sec" | "secs" | "second" | "seconds" => parse_seconds(first),
        "min" | "mins" | "minute" | "minutes" => parse_seconds(first).map(|ms| ms.saturating_mul(60)),
        "hour" | "hours" => parse_seconds(first).map(|ms| ms.saturating_mul(3600)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

    #[test]
    fn go_durations_as_openai_sends_them() {
        assert_eq!(parse_go_duration("12ms"), Some(12));
        assert_eq!(parse_go_duration("1s"), Some(1000));
        assert_eq!(parse_go_duration("6m0s"), Some(360_000));
        assert_eq!(parse_go_duration("1m51.535s"), Some(111_535));
        assert_eq!(parse_go_duration("24h6m34s"), Some(86_794_000));
        assert_eq!(parse_go_duration("0"), Some(0));
        assert_eq!(parse_go_duration("500us"), Some(1), "sub-millisecond rounds up");
        assert_eq!(parse_go_duration("1.5µs"), Some(1));
        assert_eq!(parse_go_duration("47.434392449s"), Some(47_435));
    }

    #[test]
    fn go_durations_reject_garbage_and_saturate() {
        for bad in ["", "-1s", "1x", "s", "1.2.3s", "NaN", "inf", "1", ".5s", "1e3s"] {
            assert_eq!(parse_go_duration(bad), None, "{bad:?}");
        }
        assert_eq!(parse_go_duration("99999999999999999999999999h"), Some(u64::MAX));
        assert_eq!(parse_go_duration(&format!("{}h", "9".repeat(500))), Some(u64::MAX));
    }

    #[test]
    fn retry_after_seconds_fractions_and_dates() {
        assert_eq!(parse_retry_after("30", NOW), Some(30_000));
        assert_eq!(parse_retry_after(" 1.5 ", NOW), Some(1500));
        assert_eq!(parse_retry_after("0", NOW), Some(0));
        assert_eq!(parse_retry_after("Thu, 01 Jan 2026 00:00:20 GMT", NOW), Some(20_000));
        assert_eq!(parse_retry_after("Wed, 31 Dec 2025 23:59:00 GMT", NOW), Some(0), "past dates wait 0");
        for bad in ["-1", "NaN", "inf", "soon", "1e3", ""] {
            assert_eq!(parse_retry_after(bad, NOW), None, "{bad:?}");
        }
        assert_eq!(parse_retry_after(&"9".repeat(40), NOW), Some(u64::MAX));
    }

    #[test]
    fn milliseconds_round_up() {
        assert_eq!(parse_millis("1500"), Some(1500));
        assert_eq!(parse_millis("0.2"), Some(1));
        assert_eq!(parse_millis("-5"), None);
    }

    #[test]
    fn rfc3339_future_past_and_garbage() {
        assert_eq!(parse_rfc3339_wait("2026-01-01T00:00:30Z", NOW), Some(30_000));
        assert_eq!(parse_rfc3339_wait("2026-01-01T00:00:00.250Z", NOW), Some(250));
        assert_eq!(parse_rfc3339_wait("2025-12-31T23:59:59Z", NOW), Some(0), "a reset already past is 0");
        // Before 1970 is outside what humantime reads: ignored.
        assert_eq!(parse_rfc3339_wait("1960-01-01T00:00:00Z", NOW), None);
        assert_eq!(parse_rfc3339_wait("tomorrow", NOW), None);
    }

    #[test]
    fn rfc3339_offsets_and_lowercase() {
        assert_eq!(parse_rfc3339_wait("2026-01-01T01:00:30+01:00", NOW), Some(30_000));
        assert_eq!(parse_rfc3339_wait("2025-12-31T19:00:30.5-05:00", NOW), Some(30_500));
        assert_eq!(parse_rfc3339_wait("2026-01-01T05:45:30+05:45", NOW), Some(30_000));
        assert_eq!(parse_rfc3339_wait("2026-01-01T00:00:30+00:00", NOW), Some(30_000));
        assert_eq!(parse_rfc3339_wait("2026-01-01T00:00:30-00:00", NOW), Some(30_000), "offset unknown: UTC");
        assert_eq!(parse_rfc3339_wait("2026-01-01t00:00:30z", NOW), Some(30_000));
        assert_eq!(parse_rfc3339_wait("2026-01-01T00:00:30", NOW), Some(30_000), "no offset: UTC, as before");
        // Near the epoch, an offset may put the time before it: past, a wait of 0.
        assert_eq!(parse_rfc3339_wait("1970-01-01T00:30:00+01:00", NOW), Some(0));
        for bad in [
            "2026-01-01T01:00:30+24:00",
            "2026-01-01T01:00:30+01:60",
            "2026-01-01T01:00:30+1:000",
            "2026-01-01T01:00:30+01-00",
            "2026-01-01T01:00:30*01:00",
            "2026-01-01T01:00:30+01:00Z",
            "2026-01-01T01:00:3\u{e9}+01:00",
            "2026-01-01T01:00:30\u{e9}01:00",
            "+01:00",
        ] {
            assert_eq!(parse_rfc3339_wait(bad, NOW), None, "{bad:?}");
        }
    }

    #[test]
    fn resets_of_any_form() {
        assert_eq!(parse_any_reset("1767225660000", NOW), Some(60_000), "epoch ms");
        assert_eq!(parse_any_reset("1767225630", NOW), Some(30_000), "epoch seconds");
        assert_eq!(parse_any_reset("20", NOW), Some(20_000), "relative seconds");
        assert_eq!(parse_any_reset("1m0s", NOW), Some(60_000));
        assert_eq!(parse_any_reset("2026-01-01T00:01:00Z", NOW), Some(60_000));
        assert_eq!(parse_any_reset("1000", NOW), Some(1_000_000));
        assert_eq!(parse_relative_reset("60"), Some(60_000));
    }

    #[test]
    fn waits_written_in_messages() {
        assert_eq!(wait_in_text("please retry after 86400 seconds. please go here"), Some(86_400_000));
        assert_eq!(wait_in_text("requested 1500. please try again in 1.2s. visit"), Some(1200));
        assert_eq!(wait_in_text("please try again in 6m0s."), Some(360_000));
        assert_eq!(wait_in_text("please retry in 47.434392449s."), Some(47_435));
        assert_eq!(wait_in_text("try again in 30 seconds."), Some(30_000));
        assert_eq!(wait_in_text("try again in 20ms"), Some(20));
        assert_eq!(wait_in_text("please try again later."), None);
    }

    #[test]
    fn counts() {
        assert_eq!(parse_count("159976"), Some(159_976));
        assert_eq!(parse_count("12.9"), Some(12));
        assert_eq!(parse_count("-1"), None, "Azure's -1 means unknown");
        assert_eq!(parse_count("99999999999999999999999"), Some(u64::MAX));
        assert_eq!(parse_count("NaN"), None);
    }
}
