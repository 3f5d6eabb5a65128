//! The RFC 3339 timestamps (UTC, microseconds, `Z`) that open every audit record and
//! service-log line, formatted without redoing the calendar for each one.
//!
//! Owns the text of a record's `ts` as the records write it (docs/operations.md, "Audit log
//! format"): exactly what `chrono`'s `to_rfc3339_opts(SecondsFormat::Micros, true)` writes.
//! Under connection-per-op load the hub stamps several records per operation; the date and
//! time of day change once a second, so they are formatted once per second and only the six
//! digits of microseconds per record (docs/performance.md, issue 13). Refuses: reading the
//! clock (the caller passes the instant, as chrono's or as the system clock's reading).

use chrono::{DateTime, SecondsFormat, Timelike, Utc};
use std::time::{SystemTime, UNIX_EPOCH};

/// The formatted `YYYY-MM-DDTHH:MM:SS.` of the last second stamped.
#[derive(Default)]
pub struct Stamper {
    second: Option<i64>,
    prefix: String,
}

impl Stamper {
    /// Appends `at` as `YYYY-MM-DDTHH:MM:SS.ffffffZ` to `out`.
    pub fn push(&mut self, at: DateTime<Utc>, out: &mut String) {
        let nanos = at.nanosecond();
        if nanos >= 1_000_000_000 {
            // A leap second: rare enough to leave to chrono, which writes it as :60.
            out.push_str(&at.to_rfc3339_opts(SecondsFormat::Micros, true));
            return;
        }
        let second = at.timestamp();
        if self.second != Some(second) {
            self.prefix.clear();
            let full = at.to_rfc3339_opts(SecondsFormat::Secs, true);
            // `…:SSZ` → `…:SS.`
            self.prefix
                .push_str(full.strip_suffix('Z').unwrap_or(&full));
            self.prefix.push('.');
            self.second = Some(second);
        }
        out.push_str(&self.prefix);
        push_micros(nanos / 1_000, out);
    }

    /// Appends `at` as `push` writes it, from the system clock's reading itself: chrono's
    /// `Utc::now` converts every reading to a calendar date, which is the work this type
    /// saves (docs/performance.md, issue 13, "Design decisions"). A reading before
    /// 1970 goes through chrono.
    pub fn push_system(&mut self, at: SystemTime, out: &mut String) {
        let Ok(since) = at.duration_since(UNIX_EPOCH) else {
            return self.push(DateTime::<Utc>::from(at), out);
        };
        let second = i64::try_from(since.as_secs()).ok();
        match second {
            Some(sec) if self.second == Some(sec) => {
                out.push_str(&self.prefix);
                push_micros(since.subsec_micros(), out);
            }
            _ => self.push(DateTime::<Utc>::from(at), out),
        }
    }

    /// `at` as a new string (`push_system`).
    #[cfg(test)]
    pub fn text_system(&mut self, at: SystemTime) -> String {
        let mut s = String::with_capacity(27);
        self.push_system(at, &mut s);
        s
    }

    /// `at` as a new string (`push`).
    #[cfg(test)]
    pub fn text(&mut self, at: DateTime<Utc>) -> String {
        let mut s = String::with_capacity(27);
        self.push(at, &mut s);
        s
    }
}

/// Appends `ffffffZ`: the six digits of `micros` (below a million) and the zone. One `push`
/// per ASCII digit into reserved room: the earlier digit array went through `str::from_utf8`,
/// whose check was half of this function's instructions, about 100 per stamp and four stamps
/// per W1 op (docs/performance.md, issue 13, "Design decisions").
fn push_micros(micros: u32, out: &mut String) {
    out.reserve(7);
    for div in [100_000, 10_000, 1_000, 100, 10, 1] {
        // A digit 0..=9, so `b'0' + digit` is an ASCII digit.
        out.push(char::from(b'0' + (micros / div % 10) as u8));
    }
    out.push('Z');
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    /// Across seconds, days, a leap year's end and microsecond edges, the text is chrono's.
    #[test]
    fn writes_exactly_what_chrono_writes() {
        let mut s = Stamper::default();
        let starts = [
            Utc.with_ymd_and_hms(2026, 12, 2, 2, 9, 53).unwrap(),
            Utc.with_ymd_and_hms(2028, 12, 31, 23, 59, 59).unwrap(),
            Utc.with_ymd_and_hms(1999, 1, 1, 0, 0, 0).unwrap(),
        ];
        for start in starts {
            for step_us in [
                0i64,
                1,
                9,
                10,
                999_999,
                1_000_000,
                1_000_001,
                86_399_999_999,
            ] {
                let at = start + chrono::Duration::microseconds(step_us);
                assert_eq!(
                    s.text(at),
                    at.to_rfc3339_opts(SecondsFormat::Micros, true),
                    "{at:?}"
                );
            }
        }
        // From the system clock's reading, the same text, warm or cold, and before 1970.
        for start in starts {
            for step_us in [0u64, 1, 999_999, 1_000_000, 86_399_999_999] {
                let at = start + chrono::Duration::microseconds(step_us as i64);
                let sys = SystemTime::from(at);
                let want = at.to_rfc3339_opts(SecondsFormat::Micros, true);
                assert_eq!(s.text_system(sys), want, "{at:?}");
                assert_eq!(Stamper::default().text_system(sys), want, "{at:?}");
                assert_eq!(s.text_system(sys), want, "{at:?}");
            }
        }
        let old = Utc.with_ymd_and_hms(1969, 12, 31, 23, 59, 59).unwrap()
            + chrono::Duration::microseconds(250);
        assert_eq!(
            s.text_system(SystemTime::from(old)),
            old.to_rfc3339_opts(SecondsFormat::Micros, true)
        );
        // Nanoseconds below a microsecond are cut, as chrono cuts them.
        let at = starts[0] + chrono::Duration::nanoseconds(1_999);
        assert_eq!(s.text(at), "2026-12-02T02:09:53.000001Z");
    }
}
