//! Percentiles and medians of samples.

/// The `p`-th percentile (0..=100) of `samples`, nearest rank; `None` if empty.
pub fn percentile(samples: &[f64], p: f64) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    let mut v = samples.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// The median of `samples`; `None` if empty.
pub fn median(samples: &[f64]) -> Option<f64> {
    percentile(samples, 50.0)
}

/// Latency summary in milliseconds.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct Latency {
    /// Number of samples.
    pub n: usize,
    /// Median, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Largest, ms.
    pub max_ms: f64,
}

impl Latency {
    /// Summarises samples given in nanoseconds.
    pub fn from_ns(samples_ns: &[u64]) -> Option<Latency> {
        let ms: Vec<f64> = samples_ns.iter().map(|n| *n as f64 / 1e6).collect();
        Some(Latency {
            n: ms.len(),
            p50_ms: percentile(&ms, 50.0)?,
            p99_ms: percentile(&ms, 99.0)?,
            max_ms: percentile(&ms, 100.0)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v = [5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(percentile(&v, 50.0), Some(3.0));
        assert_eq!(percentile(&v, 100.0), Some(5.0));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(median(&[]), None);
    }
}
