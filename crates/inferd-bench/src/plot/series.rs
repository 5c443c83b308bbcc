//! From reports to plotted series: labels, TTFT CDF steps, throughput-vs-agents lines.

use crate::plot::chart::Series;
use crate::report::BenchReport;
use crate::sample;
use anyhow::{bail, Result};

/// Each report's label: `overrides` when given (one per report), else its engine with the
/// inferd extensions it used (`inferd +sessions`), prefixed by the model when the reports are
/// of more than one model, and (`distinct`: one line per report) followed by the agent count
/// where two labels would be equal.
pub fn labels(
    reports: &[BenchReport],
    overrides: &[String],
    distinct: bool,
) -> Result<Vec<String>> {
    if !overrides.is_empty() {
        if overrides.len() != reports.len() {
            bail!(
                "{} labels for {} reports: give one --label per report, or none",
                overrides.len(),
                reports.len()
            );
        }
        return Ok(overrides.to_vec());
    }
    let one_model = reports
        .iter()
        .all(|r| r.model_name() == reports[0].model_name());
    let base: Vec<String> = reports
        .iter()
        .map(|r| match one_model {
            true => r.engine_label(),
            false => format!("{} {}", r.model_name(), r.engine_label()),
        })
        .collect();
    Ok(base
        .iter()
        .zip(reports)
        .map(|(l, r)| {
            if distinct && base.iter().filter(|b| *b == l).count() > 1 {
                format!("{l} ({} agents)", sample::agents(r))
            } else {
                l.clone()
            }
        })
        .collect())
}

/// The empirical CDF of ascending `values` as a step line: (v, fraction of values <= v).
pub fn cdf_points(sorted: &[f64]) -> Vec<(f64, f64)> {
    let n = sorted.len() as f64;
    let mut pts = Vec::with_capacity(2 * sorted.len());
    for (i, &v) in sorted.iter().enumerate() {
        pts.push((v, i as f64 / n));
        pts.push((v, (i + 1) as f64 / n));
    }
    pts
}

/// One CDF line per report (its measured requests' TTFTs, [`crate::sample`]).
pub fn ttft_cdf_series(reports: &[BenchReport], labels: &[String]) -> Vec<Series> {
    reports
        .iter()
        .zip(labels)
        .map(|(r, l)| Series {
            label: l.clone(),
            points: cdf_points(&sample::ttft_ms(r)),
        })
        .collect()
}

/// One line per distinct label: (agents, generated tok/s) of its reports, by agent count.
pub fn throughput_series(reports: &[BenchReport], labels: &[String]) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for (r, l) in reports.iter().zip(labels) {
        let point = (
            sample::agents(r) as f64,
            crate::compare::Headline::of(r).tok_per_s,
        );
        match out.iter_mut().find(|s| s.label == *l) {
            Some(s) => s.points.push(point),
            None => out.push(Series {
                label: l.clone(),
                points: vec![point],
            }),
        }
    }
    for s in &mut out {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// Distinct values in first-seen order, joined with ", ".
pub fn distinct(values: impl IntoIterator<Item = String>) -> String {
    let mut v: Vec<String> = Vec::new();
    for x in values {
        if !v.contains(&x) {
            v.push(x);
        }
    }
    v.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_steps_reach_one() {
        let p = cdf_points(&[10.0, 20.0, 40.0, 80.0]);
        assert_eq!(p.len(), 8);
        assert_eq!(p[0], (10.0, 0.0));
        assert_eq!(p[1], (10.0, 0.25));
        assert_eq!(p[7], (80.0, 1.0));
        assert!(p.windows(2).all(|w| w[1].0 >= w[0].0 && w[1].1 >= w[0].1));
        assert!(cdf_points(&[]).is_empty());
    }
}
