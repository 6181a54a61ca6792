//! Where the machine's CPU time went during a benchmark window, read from `/proc` (Linux).
//!
//! A latency percentile measured on a machine with no idle time left says as much about the
//! scheduler as about the code, and the benchmarks run everything (clients, API, workers,
//! Postgres, RabbitMQ) on the same few cores; printing the split beside the latencies tells
//! which kind of run it was.

use std::collections::HashMap;
use std::fmt;

/// Cumulative CPU ticks at one moment, the machine's and each process's.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    cores: usize,
    /// All CPUs together, in every state.
    total: u64,
    /// Of `total`, idle or waiting for I/O.
    idle: u64,
    /// Each live process by pid.
    processes: HashMap<u32, Process>,
}

impl Sample {
    /// Reads `/proc/stat` and each `/proc/<pid>/stat`; `None` where `/proc/stat` cannot be read
    /// (not Linux). A process that exits while being read is left out.
    pub fn now() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let (total, idle) = stat.lines().next().and_then(machine_ticks)?;
        let cores = stat
            .lines()
            .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
            .count();
        let mut processes = HashMap::new();
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(process) = std::fs::read_to_string(entry.path().join("stat"))
                .ok()
                .as_deref()
                .and_then(process_ticks)
            {
                processes.insert(pid, process);
            }
        }
        Some(Self {
            cores,
            total,
            idle,
            processes,
        })
    }

    /// The CPU time spent from `self` to `later`, by process name.
    pub fn until(&self, later: &Sample) -> Usage {
        let mut by_name: HashMap<&str, u64> = HashMap::new();
        for (pid, process) in &later.processes {
            // A process that started in between (a new one, or a reused pid) spent all its
            // ticks in the window.
            let before = self
                .processes
                .get(pid)
                .filter(|p| p.started == process.started)
                .map_or(0, |p| p.ticks);
            *by_name.entry(&process.name).or_default() += process.ticks.saturating_sub(before);
        }
        let mut by_name: Vec<(String, u64)> = by_name
            .into_iter()
            .filter(|(_, ticks)| *ticks > 0)
            .map(|(name, ticks)| (name.to_string(), ticks))
            .collect();
        by_name.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let total = later.total.saturating_sub(self.total);
        let idle = later.idle.saturating_sub(self.idle);
        // The two counters disagree by a few ticks: `/proc/stat` charges whole ticks to whatever
        // ran when the timer fired, a process's ticks are its measured run time, and the files
        // are read one after another while the processes keep running. The processes' own
        // time is the better lower bound, so a window never shows a process busier than the
        // machine.
        let named: u64 = by_name.iter().map(|(_, ticks)| ticks).sum();
        Usage {
            cores: later.cores,
            total,
            busy: total.saturating_sub(idle).max(named).min(total),
            by_name,
        }
    }
}

/// CPU time over a window, as shares of all the cores' time.
#[derive(Clone, Debug)]
pub struct Usage {
    cores: usize,
    total: u64,
    /// Of `total`, not idle.
    busy: u64,
    /// Ticks per process name, largest first.
    by_name: Vec<(String, u64)>,
}

impl Usage {
    /// Share (0 to 1) of all the cores' time that was not idle.
    pub fn busy(&self) -> f64 {
        self.share(self.busy)
    }

    /// Share (0 to 1) of all the cores' time spent by processes named `name`.
    pub fn of(&self, name: &str) -> f64 {
        self.share(self.by_name.iter().filter(|(n, _)| n == name).map(|(_, t)| t).sum())
    }

    /// CPU seconds of each process name, largest first (100 ticks a second).
    pub fn seconds_by_name(&self) -> impl Iterator<Item = (&str, f64)> {
        self.by_name
            .iter()
            .map(|(name, ticks)| (name.as_str(), *ticks as f64 / 100.0))
    }

    fn share(&self, ticks: u64) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            ticks as f64 / self.total as f64
        }
    }
}

/// `busy 97% of 2 cores (bench 58%, postgres 24%, beam.smp 11%, other 4%)`: the three
/// processes that took the most, and the rest of the busy time (other processes, the kernel's
/// own threads, processes that exited during the window).
impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pct = |share: f64| (share * 100.0).round();
        write!(f, "busy {}% of {} cores (", pct(self.busy()), self.cores)?;
        let mut named = 0.0;
        for (name, ticks) in self.by_name.iter().take(3) {
            let share = self.share(*ticks);
            named += share;
            write!(f, "{name} {}%, ", pct(share))?;
        }
        write!(f, "other {}%)", pct((self.busy() - named).max(0.0)))
    }
}

/// `(all ticks, idle ticks)` of the aggregate `cpu` line of `/proc/stat`: user, nice, system,
/// idle, iowait, irq, softirq and steal (guest time is already inside user).
fn machine_ticks(line: &str) -> Option<(u64, u64)> {
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let ticks: Vec<u64> = fields.take(8).map(str::parse).collect::<Result<_, _>>().ok()?;
    if ticks.len() < 5 {
        return None;
    }
    Some((ticks.iter().sum(), ticks[3] + ticks[4]))
}

/// User plus system CPU seconds a process has spent so far, all its threads (`pid` is a number
/// or `self`), from `/proc/<pid>/stat` at 100 ticks a second; `None` once it has exited, or off
/// Linux.
pub fn process_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(process_ticks(&stat)?.ticks as f64 / 100.0)
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Process {
    name: String,
    /// Ticks after boot: with the pid, tells a process from a later one that reused the pid.
    started: u64,
    /// User plus system ticks of all its threads.
    ticks: u64,
}

/// A process from its `/proc/<pid>/stat` line. The name sits in parentheses and may hold spaces
/// or parentheses itself, so the fields are counted from the last `)`. A kernel worker renames
/// itself after the work it runs (`kworker/u8:2-flush-254:0`), so all of them go by `kworker`.
fn process_ticks(stat: &str) -> Option<Process> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let mut name = stat.get(open + 1..close)?;
    if name.starts_with("kworker/") {
        name = "kworker";
    }
    // Fields 3 (state) onwards follow the name: utime is field 14, stime 15, starttime 22.
    let fields: Vec<&str> = stat.get(close + 1..)?.split_whitespace().take(20).collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Process {
        name: name.to_string(),
        started: field(22)?,
        ticks: field(14)? + field(15)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_ticks_sum_the_states_and_count_iowait_as_idle() {
        let line = "cpu  100 5 50 800 40 3 2 0 7 0";
        assert_eq!(machine_ticks(line), Some((1000, 840)));
        assert_eq!(machine_ticks("cpu0 1 2 3 4 5 6 7 8"), None);
        assert_eq!(machine_ticks("cpu  1 2 x 4 5"), None);
        assert_eq!(machine_ticks("cpu  1 2 3"), None);
    }

    #[test]
    fn process_ticks_read_past_a_name_with_spaces_and_parentheses() {
        let line = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 25 17 0 0 20 0 3 0 99 0 0";
        let process = |name: &str| Process {
            name: name.into(),
            started: 99,
            ticks: 42,
        };
        assert_eq!(process_ticks(line), Some(process("my (odd) name")));
        let worker = "7 (kworker/u8:2-flush-254:0) I 2 0 0 0 -1 69238880 0 0 0 0 25 17 0 0 20 0 1 0 99 0 0";
        assert_eq!(process_ticks(worker), Some(process("kworker")));
        assert_eq!(process_ticks("4242 (short) S 1 2"), None);
        assert_eq!(process_ticks("no parentheses here"), None);
    }

    #[test]
    fn usage_attributes_deltas_to_names_and_counts_new_processes_whole() {
        let p = |name: &str, started, ticks| Process {
            name: name.into(),
            started,
            ticks,
        };
        let before = Sample {
            cores: 2,
            total: 1_000,
            idle: 600,
            processes: HashMap::from([
                (1, p("postgres", 1, 100)),
                (2, p("postgres", 1, 50)),
                (3, p("bench", 5, 10)),
                // Gone by the second sample: its last ticks are not known, so it is not counted.
                (4, p("gone", 5, 500)),
                (6, p("earlier", 5, 25)),
                // Renamed in between (as threads and kernel workers do): the same process.
                (7, p("before-rename", 2, 1_000)),
            ]),
        };
        let after = Sample {
            cores: 2,
            total: 2_000,
            idle: 840,
            processes: HashMap::from([
                (1, p("postgres", 1, 300)),
                (2, p("postgres", 1, 150)),
                (3, p("bench", 5, 410)),
                (5, p("started", 900, 20)),
                // A pid reused by another program counts from zero.
                (6, p("reused", 950, 30)),
                (7, p("renamed", 2, 1_010)),
            ]),
        };
        let usage = before.until(&after);
        assert!((usage.busy() - 0.76).abs() < 1e-9);
        assert!((usage.of("bench") - 0.4).abs() < 1e-9);
        assert!((usage.of("postgres") - 0.3).abs() < 1e-9);
        assert!((usage.of("reused") - 0.03).abs() < 1e-9);
        assert_eq!(usage.of("gone"), 0.0);
        // Those below the top three are in "other".
        assert!((usage.of("started") - 0.02).abs() < 1e-9);
        assert!((usage.of("renamed") - 0.01).abs() < 1e-9);
        assert_eq!(
            usage.to_string(),
            "busy 76% of 2 cores (bench 40%, postgres 30%, reused 3%, other 3%)"
        );
    }

    #[test]
    fn a_process_measured_busier_than_the_machine_raises_the_machine() {
        let process = |ticks| Process {
            name: "tests".into(),
            started: 1,
            ticks,
        };
        let sample = |total, idle, ticks| Sample {
            cores: 2,
            total,
            idle,
            processes: HashMap::from([(1, process(ticks))]),
        };
        // As seen in CI: the machine's counter said 61% busy, the process's own 63%.
        let usage = sample(0, 0, 0).until(&sample(100, 39, 63));
        assert!((usage.busy() - 0.63).abs() < 1e-9);
        assert_eq!(usage.to_string(), "busy 63% of 2 cores (tests 63%, other 0%)");
        // Never more than all the cores' time.
        let usage = sample(0, 0, 0).until(&sample(100, 0, 130));
        assert_eq!(usage.busy(), 1.0);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_busy_thread_shows_up_as_this_process() {
        let before = Sample::now().expect("read /proc");
        let me = before.processes[&std::process::id()].name.clone();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(300) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let usage = before.until(&Sample::now().expect("read /proc"));
        assert!(usage.cores >= 1);
        // 300 ms of one core is at least a tenth of all the cores' time on up to 3 cores; the
        // check only asks for some of it, as the tick counters are coarse (10 ms).
        assert!(usage.of(&me) > 0.0, "{usage}");
        assert!(usage.busy() >= usage.of(&me), "{usage}");
        assert!(usage.busy() <= 1.0, "{usage}");
    }
}
