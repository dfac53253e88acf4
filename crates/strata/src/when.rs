//! Times a question names ("on 25 October 2022", "in May 2023", "last
//! week"), as a span of days a memory's writing may fall in.
//!
//! Absolute dates are read as written; relative ones ("yesterday", "last
//! month", "last May") against the recall's time. Only spans from a day to
//! a year are read: a bare month ("in July") or a weekday names no span
//! without a year to anchor it, and is left alone.

use jiff::civil::Date;
use jiff::{Timestamp, tz::TimeZone};

/// Days from `start` (inclusive) to `end` (exclusive), UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub start: Date,
    pub end: Date,
}

impl Span {
    /// Whether `t` falls in the span (UTC).
    pub fn contains(&self, t: Timestamp) -> bool {
        let d = t.to_zoned(TimeZone::UTC).date();
        self.start <= d && d < self.end
    }

    fn day(d: Date) -> Option<Span> {
        Some(Span {
            start: d,
            end: d.tomorrow().ok()?,
        })
    }

    fn month(year: i16, month: i8) -> Option<Span> {
        let start = Date::new(year, month, 1).ok()?;
        let end = start.last_of_month().tomorrow().ok()?;
        Some(Span { start, end })
    }

    fn year(year: i16) -> Option<Span> {
        Some(Span {
            start: Date::new(year, 1, 1).ok()?,
            end: Date::new(year.checked_add(1)?, 1, 1).ok()?,
        })
    }
}

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

/// The month a word names, 1–12: its English name or the name's first
/// three letters, in any case.
pub fn month_number(w: &str) -> Option<i8> {
    let w = w.to_ascii_lowercase();
    MONTHS
        .iter()
        .position(|m| *m == w || (w.len() == 3 && m.starts_with(&w)))
        .map(|i| i as i8 + 1)
}

fn day_of(w: &str) -> Option<i8> {
    let digits = w
        .strip_suffix("st")
        .or_else(|| w.strip_suffix("nd"))
        .or_else(|| w.strip_suffix("rd"))
        .or_else(|| w.strip_suffix("th"))
        .unwrap_or(w);
    let d: i8 = digits.parse().ok()?;
    (1..=31).contains(&d).then_some(d)
}

fn year_of(w: &str) -> Option<i16> {
    if w.len() != 4 {
        return None;
    }
    let y: i16 = w.parse().ok()?;
    (1900..=2199).contains(&y).then_some(y)
}

/// The span the question names, the first one read; `None` when it names
/// none.
pub fn named_span(question: &str, now: Timestamp) -> Option<Span> {
    let words: Vec<&str> = question
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let today = now.to_zoned(TimeZone::UTC).date();
    let at = |i: usize| words.get(i).copied().unwrap_or("");
    for (i, &w) in words.iter().enumerate() {
        let before = i.checked_sub(1).map_or("", at);
        // "25 October 2022", "1st September, 2023"
        if let (Some(d), Some(m), Some(y)) =
            (day_of(w), month_number(at(i + 1)), year_of(at(i + 2)))
        {
            return Date::new(y, m, d).ok().and_then(Span::day);
        }
        if let Some(m) = month_number(w) {
            // "October 25, 2022"
            if let (Some(d), Some(y)) = (day_of(at(i + 1)), year_of(at(i + 2))) {
                return Date::new(y, m, d).ok().and_then(Span::day);
            }
            // "May 2023", but not "may" the verb: a month needs its year.
            if let Some(y) = year_of(at(i + 1)) {
                return Span::month(y, m);
            }
            // "last May": the latest May before this month.
            if before.eq_ignore_ascii_case("last") {
                let y = if m < today.month() {
                    today.year()
                } else {
                    today.year() - 1
                };
                return Span::month(y, m);
            }
        }
        let lower = w.to_ascii_lowercase();
        match lower.as_str() {
            "yesterday" => return today.yesterday().ok().and_then(Span::day),
            "today" => return Span::day(today),
            "last" | "this" => {
                let last = lower == "last";
                match at(i + 1).to_ascii_lowercase().as_str() {
                    "week" => {
                        // Weeks start on Monday; this week runs to today.
                        let back_to_monday = i64::from(today.weekday().to_monday_zero_offset());
                        let monday = today
                            .checked_sub(jiff::Span::new().days(back_to_monday))
                            .ok()?;
                        return Some(if last {
                            Span {
                                start: monday.checked_sub(jiff::Span::new().days(7)).ok()?,
                                end: monday,
                            }
                        } else {
                            Span {
                                start: monday,
                                end: today.tomorrow().ok()?,
                            }
                        });
                    }
                    "month" => {
                        let first = today.first_of_month();
                        let d = if last { first.yesterday().ok()? } else { first };
                        return Span::month(d.year(), d.month());
                    }
                    "year" => return Span::year(today.year() - i16::from(last)),
                    _ => {}
                }
            }
            _ => {}
        }
        // "in 2022": a year alone.
        if let Some(y) = year_of(w) {
            let before = before.to_ascii_lowercase();
            if matches!(before.as_str(), "in" | "during" | "of" | "since" | "by") {
                return Span::year(y);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(q: &str) -> Option<(String, String)> {
        let now: Timestamp = "2026-11-27T10:00:00Z".parse().unwrap();
        named_span(q, now).map(|s| (s.start.to_string(), s.end.to_string()))
    }

    fn s(a: &str, b: &str) -> Option<(String, String)> {
        Some((a.into(), b.into()))
    }

    #[test]
    fn reads_absolute_and_relative_times() {
        assert_eq!(
            span("How did she feel on October 25, 2022 about it?"),
            s("2022-10-25", "2022-10-26")
        );
        assert_eq!(
            span("What did he book on 1st September 2023?"),
            s("2023-09-01", "2023-09-02")
        );
        assert_eq!(
            span("Why the plant on 30 August, 2023?"),
            s("2023-08-30", "2023-08-31")
        );
        assert_eq!(
            span("What did Maria donate in December 2023?"),
            s("2023-12-01", "2024-01-01")
        );
        assert_eq!(span("what changed in 2022"), s("2022-01-01", "2023-01-01"));
        assert_eq!(
            span("what did we decide yesterday"),
            s("2026-11-26", "2026-11-27")
        );
        assert_eq!(
            span("the plan from last month"),
            s("2026-10-01", "2026-11-01")
        );
        assert_eq!(span("since last May"), s("2026-05-01", "2026-06-01"));
        assert_eq!(
            span("last December's outage"),
            s("2025-12-01", "2026-01-01")
        );
        assert_eq!(span("notes from last week"), s("2026-11-16", "2026-11-23"));
        assert_eq!(
            span("what happened this year"),
            s("2026-01-01", "2027-01-01")
        );
    }

    #[test]
    fn names_nothing_without_an_anchor() {
        for q in [
            "When did Melanie go camping in July?",
            "May I ask what the database is?",
            "Which 3 services use postgres?",
            "port 8080 is taken",
            "the 2022 roadmap",
            "on 31 February 2023",
            "",
        ] {
            assert_eq!(span(q), None, "{q}");
        }
    }
}
