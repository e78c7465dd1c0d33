//! The bounds a loop runs under (`bounds.yaml`), and the checks made at the
//! start of every lap. Pure: the engine hands in what was spent.

use std::time::Duration;

/// `max_wallclock_s: null` means an hour.
pub const DEFAULT_WALLCLOCK_S: u64 = 3600;
/// The most time kept back for the wind-down turn.
pub const MAX_HANDOFF_RESERVE_S: u64 = 90;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bounds {
    pub max_iterations: u32,
    pub no_progress_window: u32,
    pub max_tokens: Option<u64>,
    pub max_wallclock_s: u64,
    /// Seconds of `max_wallclock_s` kept for the wind-down turn.
    pub handoff_reserve_s: u64,
    pub sandbox: bool,
    pub quarantine_inputs: bool,
    /// A JSON Schema (path in the package) the loop's output must satisfy.
    pub schema: Option<String>,
    pub trace: bool,
    pub require_approval: bool,
}

impl Bounds {
    /// The reserve bounded-loops derives when `handoff_reserve_s` is not
    /// given: a third of the budget, at most 90 s.
    pub fn default_reserve(max_wallclock_s: u64) -> u64 {
        (max_wallclock_s / 3).min(MAX_HANDOFF_RESERVE_S)
    }

    /// The time work turns may use.
    pub fn work_budget(&self) -> Duration {
        Duration::from_secs(self.max_wallclock_s.saturating_sub(self.handoff_reserve_s))
    }

    /// The bound that stops the run before lap `lap` starts, if any.
    pub fn stop_before(&self, lap: u32, tokens: u64, elapsed: Duration) -> Option<Stop> {
        if lap > self.max_iterations {
            return Some(Stop::Iterations {
                max: self.max_iterations,
                lap,
            });
        }
        if let Some(max) = self.max_tokens
            && tokens >= max
        {
            return Some(Stop::Tokens { max, spent: tokens });
        }
        self.out_of_time(elapsed)
    }

    /// The wall-clock bound, when the work budget is spent.
    pub fn out_of_time(&self, elapsed: Duration) -> Option<Stop> {
        (elapsed >= self.work_budget()).then_some(Stop::Wallclock {
            max: self.max_wallclock_s,
            elapsed,
            reserve: self.handoff_reserve_s,
        })
    }
}

/// A bound that stopped the run.
#[derive(Debug, Clone, PartialEq)]
pub enum Stop {
    Iterations {
        max: u32,
        lap: u32,
    },
    Tokens {
        max: u64,
        spent: u64,
    },
    Wallclock {
        max: u64,
        elapsed: Duration,
        reserve: u64,
    },
    NoProgress {
        window: u32,
    },
}

impl Stop {
    /// The reason, in bounded-loops' words (it is the run's recorded reason).
    pub fn reason(&self) -> String {
        match self {
            Stop::Iterations { max, lap } => format!("max_iterations {max} reached at lap {lap}"),
            Stop::Tokens { max, spent } => format!("token budget {max} exceeded ({spent} spent)"),
            Stop::Wallclock {
                max,
                elapsed,
                reserve,
            } => {
                let elapsed = format!("{:.1}", elapsed.as_secs_f64());
                if *reserve == 0 {
                    format!("wallclock limit {max}s exceeded ({elapsed}s elapsed)")
                } else {
                    format!(
                        "wallclock limit {max}s exceeded ({elapsed}s elapsed, {reserve}s of it reserved for the handoff)"
                    )
                }
            }
            Stop::NoProgress { window } => format!("no progress in last {window} laps"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(max_wallclock_s: u64) -> Bounds {
        Bounds {
            max_iterations: 2,
            no_progress_window: 3,
            max_tokens: Some(40),
            max_wallclock_s,
            handoff_reserve_s: Bounds::default_reserve(max_wallclock_s),
            sandbox: true,
            quarantine_inputs: true,
            schema: None,
            trace: true,
            require_approval: false,
        }
    }

    #[test]
    fn the_reserve_is_a_third_of_the_budget_up_to_ninety_seconds() {
        // As bounded-loops records `wallclock_work_s`.
        for (max, reserve) in [
            (1, 0),
            (3, 1),
            (100, 33),
            (200, 66),
            (360, 90),
            (990, 90),
            (3600, 90),
        ] {
            assert_eq!(Bounds::default_reserve(max), reserve, "{max}");
        }
    }

    #[test]
    fn stops_are_checked_in_order_and_worded_as_upstream() {
        let b = bounds(3);
        assert_eq!(b.stop_before(1, 0, Duration::ZERO), None);
        assert_eq!(
            b.stop_before(3, 0, Duration::ZERO).unwrap().reason(),
            "max_iterations 2 reached at lap 3"
        );
        assert_eq!(
            b.stop_before(2, 40, Duration::ZERO).unwrap().reason(),
            "token budget 40 exceeded (40 spent)"
        );
        assert_eq!(
            b.stop_before(2, 0, Duration::from_millis(2480))
                .unwrap()
                .reason(),
            "wallclock limit 3s exceeded (2.5s elapsed, 1s of it reserved for the handoff)"
        );
        assert_eq!(
            bounds(1)
                .stop_before(2, 0, Duration::from_millis(1660))
                .unwrap()
                .reason(),
            "wallclock limit 1s exceeded (1.7s elapsed)"
        );
    }
}
