//! Markdown tables of the arrivals, multi-turn, forked and resume workloads (fleet and stall
//! have their own in [`crate::report`]): one table per workload, the headline figures
//! ([`Headline`]) plus two of the workload's own, rows of one model and shape compared with the
//! baseline engine's row.

use crate::compare::Headline;
use crate::report::{ratio, BenchReport, Workload};
use std::fmt::Write as _;

/// The workloads these tables cover, in output order.
const WORKLOADS: [&str; 4] = ["arrivals", "multi-turn", "forked", "resume"];

/// How one report appears in its workload's table.
struct Row<'a> {
    report: &'a BenchReport,
    headline: Headline,
    shape: String,
    extra: [String; 2],
}

/// The shape column's header and the two extra columns' headers of a workload.
fn headers(workload: &str) -> (&'static str, [&'static str; 2]) {
    match workload {
        "arrivals" => ("agents @ rate, ctx/reply", ["all done s", "short replies"]),
        "multi-turn" => ("turns, ctx/reply", ["turn 0 TTFT ms", "later TTFT p50 ms"]),
        "forked" => ("agents, brief/suffix/reply", ["brief ms", "relaunch ms"]),
        _ => (
            "agents, ctx/reply, filler",
            ["turn 0 TTFT p50 ms", "return / turn 0"],
        ),
    }
}

fn ms(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.0}")).unwrap_or_else(|| "-".into())
}

fn row(r: &BenchReport) -> Option<Row<'_>> {
    let (shape, extra) = match &r.workload {
        Workload::Arrivals {
            config: c,
            summary: m,
        } => (
            format!(
                "{} @ {}/s, {}/{}",
                c.agents, c.rate_per_s, c.context_tokens, c.reply_tokens
            ),
            [format!("{:.2}", m.all_done_s), m.short_replies.to_string()],
        ),
        Workload::MultiTurn {
            config: c,
            summary: m,
        } => {
            let later: Vec<f64> = m.turns[1.min(m.turns.len())..]
                .iter()
                .filter_map(|t| t.ttft_ms)
                .collect();
            let later = crate::record::Dist::from_values(later);
            (
                format!("{}, {}/{}", c.turns, c.context_tokens, c.reply_tokens),
                [
                    ms(m.turns.first().and_then(|t| t.ttft_ms)),
                    ms((later.n > 0).then_some(later.p50)),
                ],
            )
        }
        Workload::Forked {
            config: c,
            summary: m,
        } => (
            format!(
                "{}, {}/{}/{}",
                c.agents, c.brief_tokens, c.suffix_tokens, c.reply_tokens
            ),
            [
                ms(m.pinned.as_ref().map(|p| p.create_ms).or(m.brief_ttft_ms)),
                ms(m.relaunch_ms),
            ],
        ),
        Workload::Resume {
            config: c,
            summary: m,
        } => (
            format!(
                "{}, {}/{}, {}",
                c.agents, c.context_tokens, c.reply_tokens, c.filler_requests
            ),
            [
                ms((m.ttft_turn0_ms.n > 0).then_some(m.ttft_turn0_ms.p50)),
                m.return_vs_turn0_p50
                    .map(|x| format!("{x:.2}x"))
                    .unwrap_or_else(|| "-".into()),
            ],
        ),
        Workload::Fleet { .. } | Workload::Stall { .. } => return None,
    };
    Some(Row {
        report: r,
        headline: Headline::of(r),
        shape,
        extra,
    })
}

/// The tables, separated by blank lines (empty when no report is of these workloads).
pub(crate) fn workload_tables(reports: &[BenchReport], baseline: &str) -> String {
    let rows: Vec<Row> = reports.iter().filter_map(row).collect();
    let mut s = String::new();
    for workload in WORKLOADS {
        let mut mine: Vec<&Row> = rows
            .iter()
            .filter(|x| x.report.workload_name() == workload)
            .collect();
        if mine.is_empty() {
            continue;
        }
        mine.sort_by_key(|x| {
            (
                x.report.model_name(),
                x.shape.clone(),
                x.report.engine_name() != baseline,
                x.report.engine_label(),
            )
        });
        if !s.is_empty() {
            s.push('\n');
        }
        let (shape, [x1, x2]) = headers(workload);
        let _ = writeln!(
            s,
            "| workload | model | {shape} | engine | tok/s | TTFT p50 ms | TTFT p90 ms | \
             TTFT max ms | cached % | {x1} | {x2} | errors | tok/s vs {baseline} | \
             TTFT p50 vs {baseline} |"
        );
        let _ = writeln!(
            s,
            "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for x in &mine {
            table_row(&mut s, workload, x, &mine, baseline);
        }
    }
    s
}

fn table_row(s: &mut String, workload: &str, x: &Row, all: &[&Row], baseline: &str) {
    let r = x.report;
    let h = &x.headline;
    let ttft =
        |h: &Headline, f: fn(&crate::record::Dist) -> f64| (h.ttft_ms.n > 0).then(|| f(&h.ttft_ms));
    let base = all.iter().find(|b| {
        b.report.engine_name() == baseline
            && b.report.extensions().is_none()
            && b.report.model_name() == r.model_name()
            && b.shape == x.shape
    });
    let (tok_ratio, ttft_ratio) = match base {
        Some(b) if !std::ptr::eq(*b, x) => (
            ratio(h.tok_per_s, Some(b.headline.tok_per_s)),
            match (ttft(h, |d| d.p50), ttft(&b.headline, |d| d.p50)) {
                (Some(v), Some(bv)) => ratio(v, Some(bv)),
                _ => "-".into(),
            },
        ),
        _ => ("-".into(), "-".into()),
    };
    let _ = writeln!(
        s,
        "| {workload} | {} | {} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        r.model_name(),
        x.shape,
        r.engine_label(),
        h.tok_per_s,
        ms(ttft(h, |d| d.p50)),
        ms(ttft(h, |d| d.p90)),
        ms(ttft(h, |d| d.max)),
        h.cached_pct
            .map(|c| format!("{c:.1}"))
            .unwrap_or_else(|| "-".into()),
        x.extra[0],
        x.extra[1],
        h.errors,
        tok_ratio,
        ttft_ratio
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::ClientConfig;
    use crate::forked::{ForkedConfig, ForkedSummary};
    use crate::multi_turn::{MultiTurnConfig, MultiTurnSummary};
    use crate::record::RequestRecord;

    fn record(agent: usize, turn: usize, ttft_ms: u64, cached: u64) -> RequestRecord {
        let first = ttft_ms * 1000;
        RequestRecord {
            agent,
            turn,
            role: "agent".into(),
            start_us: 0,
            first_token_us: Some(first),
            end_us: first + 100_000,
            chunk_us: (0..10).map(|i| first + i * 10_000).collect(),
            max_tokens: 10,
            completion_tokens: 10,
            prompt_tokens: Some(200),
            cached_tokens: Some(cached),
            usage_reported: true,
            finish_reason: Some("length".into()),
            error: None,
            ttft_us: None,
            max_gap_us: None,
        }
    }

    fn report(engine: &str, workload: Workload, requests: Vec<RequestRecord>) -> BenchReport {
        let mut r = BenchReport::new(ClientConfig::new("http://x"), None, workload, requests);
        r.meta.insert("engine".into(), engine.into());
        r.meta.insert("model".into(), "m".into());
        r
    }

    fn forked(engine: &str, ttft_ms: u64, cached: u64, pin_brief: bool) -> BenchReport {
        let recs: Vec<RequestRecord> = (0..4).map(|a| record(a, 0, ttft_ms, cached)).collect();
        let summary = ForkedSummary::from_records(&recs, 0, 1_000_000);
        let config = ForkedConfig {
            agents: 4,
            pin_brief,
            ..Default::default()
        };
        report(engine, Workload::Forked { config, summary }, recs)
    }

    #[test]
    fn tables_per_workload_pair_rows_with_the_baseline() {
        let turns: Vec<RequestRecord> = (0..3).map(|t| record(0, t, 100, 0)).collect();
        let multi = report(
            "inferd",
            Workload::MultiTurn {
                config: MultiTurnConfig::default(),
                summary: MultiTurnSummary::from_records(&turns, 1_000_000),
            },
            turns,
        );
        let reports = [
            forked("inferd", 100, 150, true),
            forked("llama.cpp", 400, 0, false),
            forked("inferd", 200, 150, false),
            multi,
        ];
        let t = workload_tables(&reports, "llama.cpp");
        println!("{t}");
        let tables: Vec<&str> = t.split("\n\n").collect();
        assert_eq!(tables.len(), 2, "multi-turn, then forked");
        for table in &tables {
            let cols: Vec<usize> = table.lines().map(|l| l.matches('|').count()).collect();
            assert!(cols.iter().all(|&c| c == cols[0]), "{table}");
        }
        assert!(tables[0]
            .lines()
            .nth(2)
            .unwrap()
            .starts_with("| multi-turn |"));
        // Forked: baseline first, then inferd, then inferd +pin-brief; TTFT 100/400 = 0.25.
        let rows: Vec<&str> = tables[1].lines().skip(2).collect();
        assert!(rows[0].contains("| llama.cpp |"));
        assert!(rows[1].contains("| inferd |") && rows[1].contains("| 75.0 |"));
        assert!(rows[2].contains("| inferd +pin-brief |"), "{}", rows[2]);
        assert!(rows[2].ends_with("| 1.00 | 0.25 |"), "{}", rows[2]);
    }
}
