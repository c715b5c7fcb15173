//! The Prometheus process collector's families (client_golang's `processCollector`, which
//! kube-scheduler registers), read from /proc/self on each scrape as client_golang reads
//! them through procfs. Elsewhere, or when /proc cannot be read, the families are absent,
//! as client_golang's are on a platform it does not support.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// procfs' USER_HZ: the kernel reports CPU times in these ticks on every architecture
/// Linux exposes to user space (client_golang assumes the same 100).
const USER_HZ: f64 = 100.0;

#[derive(Debug, Default)]
pub(crate) struct ProcessCollector;

/// What one scrape read; a field is `None` when its source could not be read.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Sample {
    pub(crate) cpu_seconds: Option<f64>,
    pub(crate) open_fds: Option<f64>,
    pub(crate) max_fds: Option<f64>,
    pub(crate) virtual_memory_bytes: Option<f64>,
    pub(crate) virtual_memory_max_bytes: Option<f64>,
    pub(crate) resident_memory_bytes: Option<f64>,
    pub(crate) start_time_seconds: Option<f64>,
}

impl Sample {
    fn read() -> Sample {
        let mut sample = Sample::default();
        if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
            let boot = std::fs::read_to_string("/proc/stat")
                .ok()
                .and_then(|s| boot_time(&s));
            sample.apply_stat(&stat, boot, page_size());
        }
        if let Ok(limits) = std::fs::read_to_string("/proc/self/limits") {
            sample.max_fds = limit(&limits, "Max open files");
            sample.virtual_memory_max_bytes = limit(&limits, "Max address space");
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            // The directory's own handle, open while it is listed, is among the names, as
            // it is in procfs' FileDescriptorsLen.
            sample.open_fds = Some(fds.count() as f64);
        }
        sample
    }

    /// Fields of /proc/self/stat (proc(5)), counted after the command's closing
    /// parenthesis: a command may hold spaces and parentheses itself.
    fn apply_stat(&mut self, stat: &str, boot_time: Option<f64>, page_size: f64) {
        let Some(rest) = stat.rfind(')').map(|at| &stat[at + 1..]) else {
            return;
        };
        // Field 3 (state) is rest's first.
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<f64>().ok());
        if let (Some(utime), Some(stime)) = (field(14), field(15)) {
            self.cpu_seconds = Some((utime + stime) / USER_HZ);
        }
        if let (Some(start), Some(boot)) = (field(22), boot_time) {
            self.start_time_seconds = Some(boot + start / USER_HZ);
        }
        self.virtual_memory_bytes = field(23);
        self.resident_memory_bytes = field(24).map(|pages| pages * page_size);
    }
}

/// /proc/stat's `btime`: when the machine booted, in seconds since the epoch.
fn boot_time(stat: &str) -> Option<f64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime"))
        .and_then(|v| v.trim().parse().ok())
}

/// A soft limit of /proc/self/limits; "unlimited" as procfs reads it, the largest u64.
fn limit(limits: &str, name: &str) -> Option<f64> {
    let line = limits.lines().find(|l| l.starts_with(name))?;
    let soft = line[name.len()..].split_whitespace().next()?;
    if soft == "unlimited" {
        return Some(u64::MAX as f64);
    }
    soft.parse().ok()
}

/// The page size, from the kernel's auxiliary vector as /proc/self/auxv gives it
/// (AT_PAGESZ); 4 KiB, the size of nearly every Linux system, if it cannot be read.
fn page_size() -> f64 {
    const AT_PAGESZ: u64 = 6;
    let word = std::mem::size_of::<usize>();
    let Ok(auxv) = std::fs::read("/proc/self/auxv") else {
        return 4096.0;
    };
    let value = |b: &[u8]| -> u64 {
        let mut bytes = [0u8; 8];
        bytes[..word].copy_from_slice(b);
        u64::from_ne_bytes(bytes)
    };
    auxv.chunks_exact(2 * word)
        .find(|pair| value(&pair[..word]) == AT_PAGESZ)
        .map_or(4096.0, |pair| value(&pair[word..]) as f64)
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: Option<f64>,
) -> Result<(), std::fmt::Error> {
    let Some(value) = value else {
        return Ok(());
    };
    let gauge = ConstGauge::new(value);
    gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = Sample::read();
        if let Some(cpu) = s.cpu_seconds {
            let counter = ConstCounter::new(cpu);
            // The encoder adds the counter's `_total`.
            counter.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                counter.metric_type(),
            )?)?;
        }
        let e = &mut encoder;
        gauge(
            e,
            "process_open_fds",
            "Number of open file descriptors.",
            s.open_fds,
        )?;
        gauge(
            e,
            "process_max_fds",
            "Maximum number of open file descriptors.",
            s.max_fds,
        )?;
        gauge(
            e,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            s.virtual_memory_bytes,
        )?;
        gauge(
            e,
            "process_virtual_memory_max_bytes",
            "Maximum amount of virtual memory available in bytes.",
            s.virtual_memory_max_bytes,
        )?;
        gauge(
            e,
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            s.resident_memory_bytes,
        )?;
        gauge(
            e,
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            s.start_time_seconds,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command() {
        // A command with a space and a parenthesis of its own; utime 250, stime 50 ticks,
        // started 1000 ticks after boot, 8 MiB of address space, 300 resident pages.
        let mut stat = String::from("42 (my (odd) agent) S 1 42 42 0 -1 4194560 100 0 0 0 250 50");
        stat.push_str(" 0 0 20 0 7 0 1000 8388608 300 18446744073709551615");
        let mut s = Sample::default();
        s.apply_stat(&stat, Some(1_700_000_000.0), 4096.0);
        assert_eq!(s.cpu_seconds, Some(3.0));
        assert_eq!(s.start_time_seconds, Some(1_700_000_010.0));
        assert_eq!(s.virtual_memory_bytes, Some(8_388_608.0));
        assert_eq!(s.resident_memory_bytes, Some(300.0 * 4096.0));
    }

    #[test]
    fn limits_read_the_soft_value() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max open files            1024                 524288               files     \n\
                      Max address space         unlimited            unlimited            bytes     \n";
        assert_eq!(limit(limits, "Max open files"), Some(1024.0));
        assert_eq!(limit(limits, "Max address space"), Some(u64::MAX as f64));
        assert_eq!(limit(limits, "Max core file size"), None);
        assert_eq!(
            boot_time("cpu 1 2 3\nbtime 1700000000\n"),
            Some(1_700_000_000.0)
        );
    }

    #[test]
    fn this_process_is_read() {
        let s = Sample::read();
        // A test's process may not have used a tick of CPU yet.
        assert!(s.cpu_seconds.is_some_and(|v| v >= 0.0), "{s:?}");
        for (name, v) in [
            ("open fds", s.open_fds),
            ("max fds", s.max_fds),
            ("rss", s.resident_memory_bytes),
            ("vsize", s.virtual_memory_bytes),
            ("start", s.start_time_seconds),
        ] {
            assert!(v.is_some_and(|v| v > 0.0), "{name}: {v:?}");
        }
        // Started within the last day, by the machine's clock.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        let start = s.start_time_seconds.unwrap_or_default();
        assert!(
            start <= now + 1.0 && start > now - 86_400.0,
            "{start} {now}"
        );
        assert!(page_size() >= 4096.0);
    }
}
