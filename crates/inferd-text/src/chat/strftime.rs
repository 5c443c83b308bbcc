//! `strftime_now(format)`: the current UTC time formatted with C/Python `strftime` directives
//! (the subset chat templates use: %Y %y %m %d %e %B %b %h %A %a %H %I %M %S %p %j %F %T %%).

use std::time::{SystemTime, UNIX_EPOCH};

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// A broken-down UTC time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CivilTime {
    pub year: i64,
    /// 1..=12
    pub month: u32,
    /// 1..=31
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    /// 0 = Monday
    pub weekday: u32,
    /// 1..=366
    pub yday: u32,
}

impl CivilTime {
    /// Breaks down seconds since the Unix epoch (UTC).
    pub fn from_unix(secs: i64) -> Self {
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        let jan1 = days_from_civil(year, 1, 1);
        CivilTime {
            year,
            month,
            day,
            hour: (rem / 3600) as u32,
            minute: (rem / 60 % 60) as u32,
            second: (rem % 60) as u32,
            // 1970-01-01 was a Thursday (3 with Monday = 0).
            weekday: (days + 3).rem_euclid(7) as u32,
            yday: (days - jan1 + 1) as u32,
        }
    }

    /// Now, in UTC.
    pub fn now() -> Self {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        Self::from_unix(secs)
    }

    /// Formats with strftime directives; unknown directives are kept verbatim.
    pub fn format(&self, fmt: &str) -> String {
        let mut out = String::new();
        let mut chars = fmt.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            let Some(d) = chars.next() else {
                out.push('%');
                break;
            };
            let hour12 = if self.hour % 12 == 0 {
                12
            } else {
                self.hour % 12
            };
            let piece = match d {
                'Y' => self.year.to_string(),
                'y' => format!("{:02}", self.year.rem_euclid(100)),
                'm' => format!("{:02}", self.month),
                'd' => format!("{:02}", self.day),
                'e' => format!("{:2}", self.day),
                'B' => MONTHS[self.month as usize - 1].to_string(),
                'b' | 'h' => MONTHS[self.month as usize - 1][..3].to_string(),
                'A' => WEEKDAYS[self.weekday as usize].to_string(),
                'a' => WEEKDAYS[self.weekday as usize][..3].to_string(),
                'H' => format!("{:02}", self.hour),
                'I' => format!("{:02}", hour12),
                'M' => format!("{:02}", self.minute),
                'S' => format!("{:02}", self.second),
                'p' => if self.hour < 12 { "AM" } else { "PM" }.to_string(),
                'j' => format!("{:03}", self.yday),
                'F' => format!("{}-{:02}-{:02}", self.year, self.month, self.day),
                'T' => format!("{:02}:{:02}:{:02}", self.hour, self.minute, self.second),
                'Z' => "UTC".to_string(),
                'z' => "+0000".to_string(),
                '%' => "%".to_string(),
                other => format!("%{other}"),
            };
            out.push_str(&piece);
        }
        out
    }
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// (year, month, day) to days since 1970-01-01.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = month as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        // python3 -c 'import datetime as d; t=d.datetime.fromtimestamp(1709251199, d.timezone.utc);
        //   print(t.strftime("%Y-%m-%d %H:%M:%S %a %A %b %B %j %I %p %y %e"))'
        let t = CivilTime::from_unix(1_709_251_199);
        assert_eq!(
            t.format("%Y-%m-%d %H:%M:%S %a %A %b %B %j %I %p %y %e %%"),
            "2024-02-29 23:59:59 Thu Thursday Feb February 060 11 PM 24 29 %"
        );
        let t = CivilTime::from_unix(0);
        assert_eq!(t.format("%d %b %Y, %A"), "01 Jan 1970, Thursday");
        let t = CivilTime::from_unix(-1);
        assert_eq!(t.format("%F %T"), "1969-12-31 23:59:59");
        let t = CivilTime::from_unix(4_102_444_800);
        assert_eq!(t.format("%F %a %j"), "2100-01-01 Fri 001");
    }
}
