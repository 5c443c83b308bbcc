//! `bench compare A.json B.json`: two reports' headline numbers side by side, with B/A ratios.

use crate::record::Dist;
use crate::report::{BenchReport, Workload};
use std::fmt::Write as _;

/// The numbers every workload can be compared on.
#[derive(Debug, Clone, PartialEq)]
pub struct Headline {
    pub tok_per_s: f64,
    /// The workload's main TTFT sample (fleet: turn 0 per agent; stall: the long prompt;
    /// arrivals: every agent; multi-turn: every turn; forked: every agent; resume: the
    /// agents' return), ms.
    pub ttft_ms: Dist,
    /// Worst inter-token gap (stall: during the long prompt's prefill), ms.
    pub worst_gap_ms: Option<f64>,
    /// Median gap between consecutive text chunks of the workload's requests (stall: of the
    /// decoding agents before the long prompt), ms: the per-token decode time.
    pub gap_p50_ms: Option<f64>,
    /// Fleet runs with a schema: the share of successful replies that parse as JSON, %.
    pub json_valid_pct: Option<f64>,
    /// Mean generated tokens of the measured requests ([`crate::sample`]) that succeeded.
    pub tokens_per_reply: Option<f64>,
    pub errors: usize,
    /// Mean cached fraction of the measured requests ([`crate::sample`]), % (none when the
    /// server reported no cached tokens).
    pub cached_pct: Option<f64>,
}

impl Headline {
    pub fn of(r: &BenchReport) -> Self {
        let errors = r.errors().total;
        let cached_pct = crate::sample::mean_cached_fraction(r).map(|f| f * 100.0);
        let ok: Vec<u64> = crate::sample::measured_requests(r)
            .iter()
            .filter(|x| x.ok())
            .map(|x| x.completion_tokens)
            .collect();
        let tokens_per_reply =
            (!ok.is_empty()).then(|| ok.iter().sum::<u64>() as f64 / ok.len() as f64);
        match &r.workload {
            Workload::Fleet { summary: m, .. } => Headline {
                tok_per_s: m.tok_per_s,
                ttft_ms: m.ttft_turn0_ms.clone(),
                worst_gap_ms: (m.gap_ms.n > 0).then_some(m.worst_gap_ms),
                gap_p50_ms: (m.gap_ms.n > 0).then_some(m.gap_ms.p50),
                json_valid_pct: match (m.json_replies, m.json_valid) {
                    (Some(n), Some(v)) if n > 0 => Some(v as f64 * 100.0 / n as f64),
                    _ => None,
                },
                errors,
                cached_pct,
                tokens_per_reply,
            },
            Workload::Stall { summary: m, .. } => Headline {
                tok_per_s: m.tok_per_s,
                ttft_ms: Dist::from_values(m.long_ttft_ms),
                worst_gap_ms: m.worst_gap_during_prefill_ms,
                gap_p50_ms: m.baseline_gap_p50_ms,
                json_valid_pct: None,
                errors,
                cached_pct,
                tokens_per_reply,
            },
            Workload::Arrivals { summary: m, .. } => Headline {
                tok_per_s: m.tok_per_s,
                ttft_ms: m.ttft_ms.clone(),
                worst_gap_ms: (m.gap_ms.n > 0).then_some(m.gap_ms.max),
                gap_p50_ms: (m.gap_ms.n > 0).then_some(m.gap_ms.p50),
                json_valid_pct: None,
                errors,
                cached_pct,
                tokens_per_reply,
            },
            Workload::MultiTurn { summary: m, .. } => Headline {
                tok_per_s: m.tok_per_s,
                ttft_ms: m.ttft_ms.clone(),
                worst_gap_ms: (m.gap_ms.n > 0).then_some(m.gap_ms.max),
                gap_p50_ms: (m.gap_ms.n > 0).then_some(m.gap_ms.p50),
                json_valid_pct: None,
                errors,
                cached_pct,
                tokens_per_reply,
            },
            Workload::Forked { summary: m, .. } => Headline {
                tok_per_s: m.tok_per_s,
                ttft_ms: m.ttft_ms.clone(),
                worst_gap_ms: (m.gap_ms.n > 0).then_some(m.gap_ms.max),
                gap_p50_ms: (m.gap_ms.n > 0).then_some(m.gap_ms.p50),
                json_valid_pct: None,
                errors,
                cached_pct,
                tokens_per_reply,
            },
            Workload::Resume { summary: m, .. } => Headline {
                tok_per_s: m.tok_per_s,
                ttft_ms: m.ttft_return_ms.clone(),
                worst_gap_ms: (m.gap_ms.n > 0).then_some(m.gap_ms.max),
                gap_p50_ms: (m.gap_ms.n > 0).then_some(m.gap_ms.p50),
                json_valid_pct: None,
                errors,
                cached_pct,
                tokens_per_reply,
            },
        }
    }
}

/// `b / a`, or "-" when either is missing or `a` is zero.
fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if a != 0.0 && a.is_finite() && b.is_finite() => {
            format!("{:.2}x", b / a)
        }
        _ => "-".into(),
    }
}

fn num(x: Option<f64>, prec: usize) -> String {
    x.map(|v| format!("{v:.prec$}"))
        .unwrap_or_else(|| "-".into())
}

/// A side-by-side table of two reports' [`Headline`]s with B/A ratios (tok/s: higher is
/// better; TTFT and gaps: lower is better). Reports of different workloads are compared
/// anyway, with a warning line.
pub fn compare_table(a: &BenchReport, b: &BenchReport) -> String {
    let (ha, hb) = (Headline::of(a), Headline::of(b));
    let mut s = String::new();
    let kind = |r: &BenchReport| r.workload_name();
    let _ = writeln!(
        s,
        "A: {} ({}, {})",
        a.engine_label(),
        kind(a),
        a.model_name()
    );
    let _ = writeln!(
        s,
        "B: {} ({}, {})",
        b.engine_label(),
        kind(b),
        b.model_name()
    );
    if kind(a) != kind(b) {
        let _ = writeln!(
            s,
            "WARNING: different workloads; the ratios compare unlike runs"
        );
    }
    let _ = writeln!(s, "  {:<16} {:>12} {:>12} {:>9}", "", "A", "B", "B/A");
    let ttft = |d: &Dist, f: fn(&Dist) -> f64| (d.n > 0).then(|| f(d));
    let mut rows: Vec<(&str, Option<f64>, Option<f64>, usize)> = vec![
        ("tok/s", Some(ha.tok_per_s), Some(hb.tok_per_s), 2),
        (
            "TTFT mean ms",
            ttft(&ha.ttft_ms, |d| d.mean),
            ttft(&hb.ttft_ms, |d| d.mean),
            1,
        ),
        (
            "TTFT p50 ms",
            ttft(&ha.ttft_ms, |d| d.p50),
            ttft(&hb.ttft_ms, |d| d.p50),
            1,
        ),
        (
            "TTFT p90 ms",
            ttft(&ha.ttft_ms, |d| d.p90),
            ttft(&hb.ttft_ms, |d| d.p90),
            1,
        ),
        (
            "TTFT max ms",
            ttft(&ha.ttft_ms, |d| d.max),
            ttft(&hb.ttft_ms, |d| d.max),
            1,
        ),
        ("tokens/reply", ha.tokens_per_reply, hb.tokens_per_reply, 1),
        ("gap p50 ms", ha.gap_p50_ms, hb.gap_p50_ms, 2),
        ("worst gap ms", ha.worst_gap_ms, hb.worst_gap_ms, 1),
        ("cached %", ha.cached_pct, hb.cached_pct, 1),
    ];
    if ha.json_valid_pct.is_some() || hb.json_valid_pct.is_some() {
        rows.push(("JSON valid %", ha.json_valid_pct, hb.json_valid_pct, 1));
    }
    rows.push(("errors", Some(ha.errors as f64), Some(hb.errors as f64), 0));
    for (name, x, y, prec) in rows {
        let _ = writeln!(
            s,
            "  {name:<16} {:>12} {:>12} {:>9}",
            num(x, prec),
            num(y, prec),
            ratio(x, y)
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::ClientConfig;
    use crate::fleet::{FleetConfig, FleetSummary};

    fn report(
        engine: &str,
        tok_per_s: f64,
        ttft: &[f64],
        worst_gap: f64,
        errors: usize,
    ) -> BenchReport {
        let mut summary = FleetSummary::from_records(&[], 0, 0);
        summary.tok_per_s = tok_per_s;
        summary.ttft_turn0_ms = Dist::from_values(ttft.iter().copied());
        summary.gap_ms = Dist::from_values([worst_gap]);
        summary.worst_gap_ms = worst_gap;
        summary.errors.total = errors;
        let mut r = BenchReport::new(
            ClientConfig::new("http://x"),
            None,
            Workload::Fleet {
                config: FleetConfig::default(),
                summary,
            },
            vec![],
        );
        r.meta.insert("engine".into(), engine.into());
        r
    }

    #[test]
    fn compare_prints_b_over_a_ratios() {
        let a = report("llama.cpp", 100.0, &[100.0, 200.0, 300.0], 40.0, 0);
        let b = report("inferd", 250.0, &[50.0, 100.0, 150.0], 10.0, 2);
        let t = compare_table(&a, &b);
        println!("{t}");
        let row = |name: &str| -> Vec<String> {
            let l = t
                .lines()
                .find(|l| l.trim_start().starts_with(name))
                .unwrap_or_else(|| panic!("no {name} row in\n{t}"));
            l[2 + 16..].split_whitespace().map(String::from).collect()
        };
        assert!(t.starts_with("A: llama.cpp (fleet"), "{t}");
        assert!(!t.contains("WARNING"));
        assert_eq!(row("tok/s"), ["100.00", "250.00", "2.50x"]);
        assert_eq!(row("TTFT mean ms"), ["200.0", "100.0", "0.50x"]);
        assert_eq!(row("TTFT p50 ms"), ["200.0", "100.0", "0.50x"]);
        assert_eq!(row("TTFT p90 ms"), ["280.0", "140.0", "0.50x"]);
        assert_eq!(row("TTFT max ms"), ["300.0", "150.0", "0.50x"]);
        assert_eq!(row("worst gap ms"), ["40.0", "10.0", "0.25x"]);
        assert_eq!(row("errors"), ["0", "2", "-"]);
    }
}
