//! `-v`: a summary of the library's metrics, printed on exit.

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

pub struct MetricsSummary {
    snapshotter: Snapshotter,
}

impl MetricsSummary {
    /// Installs an in-memory recorder; `None` if another one already is.
    pub fn install() -> Option<Self> {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().ok()?;
        leasehold::metric::describe();
        Some(MetricsSummary { snapshotter })
    }

    /// Prints one line per metric and label set to stderr.
    pub fn print(&self) {
        let mut lines: Vec<String> = self
            .snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _unit, _desc, value)| {
                let key = key.key();
                let labels: Vec<String> = key
                    .labels()
                    .map(|l| format!("{}={}", l.key(), l.value()))
                    .collect();
                let value = match value {
                    DebugValue::Counter(n) => n.to_string(),
                    DebugValue::Gauge(g) => g.into_inner().to_string(),
                    DebugValue::Histogram(h) => {
                        let mut v: Vec<f64> = h.into_iter().map(|x| x.into_inner()).collect();
                        v.sort_by(f64::total_cmp);
                        match (v.first(), v.last()) {
                            (Some(min), Some(max)) => format!(
                                "count {} min {min:.3} p50 {:.3} max {max:.3}",
                                v.len(),
                                v[v.len() / 2]
                            ),
                            _ => "count 0".into(),
                        }
                    }
                };
                format!("  {}{{{}}} {value}", key.name(), labels.join(","))
            })
            .collect();
        if lines.is_empty() {
            return;
        }
        lines.sort();
        // Never a panic when stderr is gone.
        crate::output::say!("metrics\n{}", lines.join("\n"));
    }
}
