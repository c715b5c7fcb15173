//! Child processes that never outlive the test: stopped on drop (panics included) and,
//! should the test process itself be killed, by the kernel via PR_SET_PDEATHSIG.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub struct Guarded {
    child: Option<Child>,
    what: String,
}

impl Guarded {
    /// Spawns `cmd` with stderr appended to `log`; stdout is piped for the caller.
    pub fn spawn(mut cmd: Command, what: &str, log: &Path) -> std::io::Result<Self> {
        let log = File::create(log)?;
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(log);
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        Ok(Guarded {
            child: Some(child),
            what: what.to_string(),
        })
    }

    pub fn child_mut(&mut self) -> Option<&mut Child> {
        self.child.as_mut()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// SIGTERM, then SIGKILL after `grace`; returns how the process ended.
    pub fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if let Ok(pid) = i32::try_from(child.id()) {
            // SAFETY: plain kill(2) on our own child's pid, which we have not reaped yet.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            match child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Err(_) => break,
            }
        }
        eprintln!("{} did not stop within {grace:?}; killing it", self.what);
        let _ = child.kill();
        child.wait().ok()
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(15));
    }
}
