//! Repeated warnings, rate-limited: a full disk fails every block write, and one line
//! per write would grow the log without bound. The first warning of a kind is printed;
//! more of the same kind within the window are counted, and the next one printed after
//! it says how many were held back.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// One warning of each kind per window.
pub struct Throttle {
    window: Duration,
    /// Per kind: when one was last printed, and how many were held back since.
    seen: HashMap<String, (Instant, u64)>,
}

impl Throttle {
    pub fn new(window: Duration) -> Self {
        Throttle {
            window,
            seen: HashMap::new(),
        }
    }

    /// The line to print for a warning of `kind`, or `None` to hold it back.
    pub fn admit(&mut self, kind: &str, msg: &str, now: Instant) -> Option<String> {
        match self.seen.get_mut(kind) {
            Some((last, held)) if now.duration_since(*last) < self.window => {
                *held += 1;
                None
            }
            Some((last, held)) => {
                let line = if *held > 0 {
                    format!(
                        "{msg} ({held} more like it in the last {} s)",
                        self.window.as_secs()
                    )
                } else {
                    msg.to_string()
                };
                *last = now;
                *held = 0;
                Some(line)
            }
            None => {
                self.seen.insert(kind.to_string(), (now, 0));
                Some(msg.to_string())
            }
        }
    }

    /// Lines for the warnings still held back (at shutdown: nothing goes unsaid).
    pub fn flush(&mut self) -> Vec<String> {
        let mut out: Vec<String> = self
            .seen
            .iter()
            .filter(|(_, (_, held))| *held > 0)
            .map(|(kind, (_, held))| format!("{held} more warning(s) like '{kind}' held back"))
            .collect();
        out.sort();
        self.seen.clear();
        out
    }
}

/// The kind of a store error, for throttling: its operation and OS error, not its path.
pub(crate) fn kind_of(e: &inferd_kvstore::StoreError) -> String {
    match e {
        inferd_kvstore::StoreError::Io { op, source, .. } => format!("{op}: {:?}", source.kind()),
        other => format!("{:?}", std::mem::discriminant(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_kind_per_window_then_a_count() {
        let mut t = Throttle::new(Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(
            t.admit("full", "disk full", t0).as_deref(),
            Some("disk full")
        );
        for i in 1..=500 {
            assert_eq!(
                t.admit("full", "disk full", t0 + Duration::from_millis(i)),
                None
            );
        }
        // Another kind is not held back by the first.
        assert!(t.admit("perm", "denied", t0).is_some());
        let later = t
            .admit("full", "disk full", t0 + Duration::from_secs(61))
            .unwrap();
        assert_eq!(later, "disk full (500 more like it in the last 60 s)");
        assert_eq!(
            t.admit("full", "disk full", t0 + Duration::from_secs(62)),
            None
        );
        // At the end, what is still held back is said.
        assert_eq!(t.flush(), ["1 more warning(s) like 'full' held back"]);
        assert!(t.flush().is_empty());
    }
}
