//! CPU seconds and peak RSS of a process from /proc, the same way for every scheduler.

use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("unexpected format of {0}")]
    Format(String),
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    /// utime + stime of all the process's threads, in seconds.
    pub cpu_seconds: f64,
    /// VmHWM: the peak resident set size, in bytes.
    pub peak_rss_bytes: u64,
}

fn read(path: &Path) -> Result<String, ProcError> {
    std::fs::read_to_string(path).map_err(|source| ProcError::Read {
        path: path.display().to_string(),
        source,
    })
}

pub fn usage(pid: u32) -> Result<Usage, ProcError> {
    let dir = Path::new("/proc").join(pid.to_string());
    let stat_path = dir.join("stat");
    let stat = read(&stat_path)?;
    let status = read(&dir.join("status"))?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks = if ticks > 0 { ticks as f64 } else { 100.0 };
    Ok(Usage {
        cpu_seconds: cpu_ticks(&stat)
            .ok_or_else(|| ProcError::Format(stat_path.display().to_string()))?
            as f64
            / ticks,
        peak_rss_bytes: vm_hwm(&status)
            .ok_or_else(|| ProcError::Format(dir.join("status").display().to_string()))?,
    })
}

/// Which process a reading came from: its pid, its start time (a pid reused by another
/// process has another) and its command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    /// starttime (field 22 of /proc/PID/stat), in clock ticks since boot.
    pub started: u64,
    pub command: Vec<String>,
}

impl Process {
    /// The first `words` words of the command line, every absolute path cut to its last
    /// component (temporary directories say nothing about which program ran), "…" when
    /// more follow.
    pub fn short_command(&self, words: usize) -> String {
        let mut out = self
            .command
            .iter()
            .take(words)
            .map(|a| {
                if a.starts_with('/') {
                    a.rsplit('/').next().unwrap_or(a)
                } else {
                    a.as_str()
                }
            })
            .collect::<Vec<_>>()
            .join(" ");
        if self.command.len() > words {
            out.push_str(" …");
        }
        out
    }
}

pub fn process(pid: u32) -> Result<Process, ProcError> {
    let dir = Path::new("/proc").join(pid.to_string());
    let stat_path = dir.join("stat");
    let stat = read(&stat_path)?;
    let cmdline_path = dir.join("cmdline");
    let cmdline = std::fs::read(&cmdline_path).map_err(|source| ProcError::Read {
        path: cmdline_path.display().to_string(),
        source,
    })?;
    Ok(Process {
        pid,
        started: start_ticks(&stat)
            .ok_or_else(|| ProcError::Format(stat_path.display().to_string()))?,
        command: cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
    })
}

/// starttime, field 22 of /proc/PID/stat (fields[19] after the command name).
fn start_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// utime (field 14) + stime (field 15) of /proc/PID/stat; fields are counted after the
/// command name, which is in parentheses and may hold spaces.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is fields[11], stime fields[12].
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn vm_hwm(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_and_status() {
        let stat = "1234 (my (odd) proc) S 1 1234 1234 0 -1 4194304 100 0 0 0 250 50 0 0 20 0 8 0 4321 0 0";
        assert_eq!(cpu_ticks(stat), Some(300));
        assert_eq!(start_ticks(stat), Some(4321));
        assert_eq!(vm_hwm("Name:\tx\nVmHWM:\t  2048 kB\n"), Some(2048 * 1024));
        assert_eq!(vm_hwm("Name:\tx\n"), None);
    }

    #[test]
    fn reads_our_own_process() {
        let u = usage(std::process::id()).expect("own /proc entry");
        assert!(u.peak_rss_bytes > 0);
        let me = process(std::process::id()).expect("own /proc entry");
        assert!(me.started > 0 && !me.command.is_empty());
        assert_eq!(me, process(std::process::id()).expect("own /proc entry"));
    }

    #[test]
    fn short_command_cuts_paths() {
        let p = Process {
            pid: 1,
            started: 1,
            command: vec![
                "/work/.build/controlplane".into(),
                "--name".into(),
                "bench-host".into(),
                "--kubeconfig".into(),
                "/tmp/x/kubeconfig".into(),
            ],
        };
        assert_eq!(
            p.short_command(5),
            "controlplane --name bench-host --kubeconfig kubeconfig"
        );
        assert_eq!(p.short_command(3), "controlplane --name bench-host …");
    }
}
