//! A logarithmic axis whose labels fall on 1-2-5 values (10, 20, 50, 100, ...), thinned to
//! one per decade when there is no room; grid lines at 1..9 of each decade. (plotters' own
//! log axis labels powers of the base only: two labels for 20 ms .. 3 s.)

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use std::ops::Range;

/// Logarithmic `lo..hi` (both positive).
#[derive(Debug, Clone, Copy)]
pub struct LogAxis {
    lo: f64,
    hi: f64,
}

impl LogAxis {
    pub fn new(lo: f64, hi: f64) -> Self {
        let lo = lo.max(f64::MIN_POSITIVE);
        LogAxis {
            lo,
            hi: hi.max(lo * 1.0001),
        }
    }

    /// Values `m * 10^k` in range, for each multiplier `m` of `mults`, ascending.
    fn decades(&self, mults: &[f64]) -> Vec<f64> {
        let mut out = Vec::new();
        let mut p = 10f64.powf(self.lo.log10().floor());
        while p <= self.hi {
            out.extend(
                mults
                    .iter()
                    .map(|m| m * p)
                    .filter(|v| (self.lo..=self.hi).contains(v)),
            );
            p *= 10.0;
        }
        out
    }
}

impl Ranged for LogAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let v = value.max(self.lo);
        let f = (v.ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln());
        limit.0 + (f * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        let max = hint.max_num_points();
        if hint.weight().allow_light_points() {
            let grid = self.decades(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
            if grid.len() <= max {
                return grid;
            }
        }
        for mults in [&[1.0, 2.0, 5.0][..], &[1.0][..]] {
            let v = self.decades(mults);
            if v.len() <= max.max(2) {
                return v;
            }
        }
        let v = self.decades(&[1.0]);
        let step = v.len().div_ceil(max.max(1));
        v.into_iter().step_by(step).collect()
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plotters::coord::ranged1d::BoldPoints;

    #[test]
    fn labels_are_one_two_five() {
        let a = LogAxis::new(16.0, 4000.0);
        assert_eq!(
            a.key_points(BoldPoints(10)),
            [20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0]
        );
        assert_eq!(a.key_points(BoldPoints(4)), [100.0, 1000.0]);
        assert_eq!(a.map(&16.0, (0, 100)), 0);
        assert_eq!(a.map(&4000.0, (0, 100)), 100);
        assert_eq!(a.map(&253.0, (0, 100)), 50);
    }
}
