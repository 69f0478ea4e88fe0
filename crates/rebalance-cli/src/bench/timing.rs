//! Medians of repeated runs, batched so that short operations are timed over a few
//! milliseconds, as the Java reference timings are.
//!
//! Benchmarks measure real elapsed time, so this module reads `std::time::Instant` (monotonic),
//! not tokio's clock, which tests may pause.

use std::time::{Duration, Instant};

/// How to sample one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sampling {
    /// Exactly this many samples, or `None` to fit them into `budget`.
    pub runs: Option<usize>,
    /// Time to spend on samples when `runs` is `None` (at least 3 samples are taken anyway).
    pub budget: Duration,
    /// At most this many samples when `runs` is `None`.
    pub max_runs: usize,
    /// A sample repeats the operation until it lasts at least this long.
    pub min_sample: Duration,
}

impl Sampling {
    /// Up to `max_runs` samples in about one second, each sample at least 2 ms.
    pub fn within_a_second(max_runs: usize, runs: Option<usize>) -> Self {
        Self {
            runs,
            budget: Duration::from_secs(1),
            max_runs,
            min_sample: Duration::from_millis(2),
        }
    }
}

/// The result of sampling an operation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    /// Median time of one operation, in microseconds.
    pub median_us: f64,
    /// Samples taken.
    pub runs: usize,
    /// Operations per sample.
    pub batch: usize,
}

/// Warms `op` up with one call, then takes samples of `batch` calls each and returns the median
/// time per call. `op` returns something so that the work is not optimized away; errors stop the
/// measurement.
pub fn measure<T, E>(
    sampling: Sampling,
    mut op: impl FnMut() -> Result<T, E>,
) -> Result<Measured, E> {
    let start = Instant::now();
    std::hint::black_box(op()?);
    let once = start.elapsed().max(Duration::from_nanos(1));
    let batch = (sampling.min_sample.as_nanos() / once.as_nanos()).clamp(1, 1_000_000) as usize;
    let runs = sampling.runs.unwrap_or_else(|| {
        let per_sample = once.as_secs_f64() * batch as f64;
        ((sampling.budget.as_secs_f64() / per_sample) as usize).clamp(3, sampling.max_runs.max(3))
    });
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs.max(1) {
        let start = Instant::now();
        for _ in 0..batch {
            std::hint::black_box(op()?);
        }
        samples.push(start.elapsed().as_secs_f64() * 1e6 / batch as f64);
    }
    Ok(Measured {
        median_us: median(&mut samples),
        runs: samples.len(),
        batch,
    })
}

/// The median (the mean of the middle two for an even count); 0 for no samples.
pub fn median(samples: &mut [f64]) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort_by(f64::total_cmp);
    let mid = samples.len() / 2;
    if samples.len() % 2 == 1 {
        samples[mid]
    } else {
        (samples[mid - 1] + samples[mid]) / 2.0
    }
}

/// Rounds to three decimals (nanoseconds when the unit is microseconds).
pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    #[test]
    fn medians() {
        assert_eq!(median(&mut []), 0.0);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn three_decimals() {
        assert_eq!(round3(1.23456), 1.235);
        assert_eq!(round3(2.0), 2.0);
        assert_eq!(round3(0.0004), 0.0);
    }

    #[test]
    fn short_operations_are_batched_and_runs_are_honoured() {
        let mut calls = 0u64;
        let m = measure(
            Sampling {
                runs: Some(4),
                ..Sampling::within_a_second(15, None)
            },
            || {
                calls += 1;
                Ok::<_, Infallible>(calls)
            },
        )
        .unwrap();
        assert_eq!(m.runs, 4);
        assert!(m.batch > 1, "a trivial closure is batched");
        assert_eq!(calls, 1 + 4 * m.batch as u64);
    }

    /// Spins for `d` (no sleep: the scheduler's granularity would decide the time).
    fn spin(d: Duration) -> Result<(), Infallible> {
        let start = Instant::now();
        while start.elapsed() < d {
            std::hint::spin_loop();
        }
        Ok(())
    }

    /// The median is per call, not per batch: a 100 µs operation batched to fill 2 ms samples
    /// reports about 100 µs. The upper bound leaves ten times that for a loaded machine; a
    /// per-batch figure would be about 20 times the operation.
    #[test]
    fn the_median_is_the_time_of_one_call() {
        let op = Duration::from_micros(100);
        let sampling = Sampling {
            runs: Some(3),
            ..Sampling::within_a_second(3, None)
        };
        let m = measure(sampling, || spin(op)).unwrap();
        assert!(m.median_us >= 100.0, "{m:?}");
        assert!(m.median_us < 1000.0, "{m:?}");
    }

    /// Without a set number of runs, samples fill the budget up to `max_runs`, and never fall
    /// below three.
    #[test]
    fn without_runs_the_budget_decides_within_bounds() {
        let quick = Sampling::within_a_second(7, None);
        // 2 ms samples in a second: 500 would fit, 7 are allowed.
        let m = measure(quick, || spin(Duration::from_micros(20))).unwrap();
        assert_eq!(m.runs, 7, "{m:?}");
        // 2 ms samples in a 1 ms budget: none would fit, three are taken anyway.
        let tight = Sampling {
            budget: Duration::from_millis(1),
            ..quick
        };
        let m = measure(tight, || spin(Duration::from_micros(20))).unwrap();
        assert_eq!(m.runs, 3, "{m:?}");
    }

    #[test]
    fn errors_stop_the_measurement() {
        let r = measure(Sampling::within_a_second(3, None), || Err::<(), _>("no"));
        assert_eq!(r, Err("no"));
    }
}
