//! The few system calls the standard library does not offer: signalling a process group,
//! the parent-death signal, dying of a signal, and blocking signals to wait for them
//! (`sigwaitinfo`) instead of catching them.
//!
//! They are the only `unsafe` in the agent. Each touches no memory of this process but
//! the signal sets it is handed by reference on its own stack frame; the `unsafe` is only
//! there because they are foreign functions.

use std::io;

/// Sends `signal` to process group `pgid`; an error (the group is gone) is only logged.
///
/// `killpg` is one plain syscall on an integer, with no memory involved, so the `unsafe`
/// here cannot break memory safety; spawning `kill(1)` instead would fork a process at
/// exactly the moment the agent wants to stop things, and would depend on `PATH`. Callers
/// make sure the group is the one they mean (a child not reaped yet, or a leader whose
/// start time they checked), so the id cannot have been reused by an unrelated group.
#[allow(unsafe_code)]
pub fn signal_group(pgid: u32, signal: libc::c_int) {
    // 0 and 1 would be "my own group" and init's: never a hook's group.
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        return;
    }
    // SAFETY: killpg takes two integers and touches no memory of this process.
    let rc = unsafe { libc::killpg(pgid, signal) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        tracing::debug!(pgid, signal, error = %e, "killpg failed");
    }
}

/// Asks the kernel to send `signal` to this process when its parent (strictly: the parent
/// thread that forked it) exits; see [`crate::guard`] for how that is made reliable.
#[allow(unsafe_code)]
pub fn set_parent_death_signal(signal: libc::c_int) -> io::Result<()> {
    let signal = libc::c_ulong::try_from(signal).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: PR_SET_PDEATHSIG takes the signal number by value; the unused arguments are
    // zero as prctl(2) asks, and no pointer is passed.
    let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, signal, 0, 0, 0) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Ends this process the way a child of it ended: killed by `signal`, so that whoever
/// waits for it sees the same status. Without a core dump (the core would be this
/// process's, not the child's). Falls back to exit status `128 + signal` for a signal
/// whose default action does not end a process.
#[allow(unsafe_code)]
pub fn die_of(signal: libc::c_int) -> ! {
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: setrlimit reads the struct passed by reference, which lives on this stack
    // frame for the whole call.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &no_core) };
    // SAFETY: resetting a disposition to SIG_DFL installs no handler (no code of ours
    // runs in signal context), and raise only sends a signal to this thread.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
    std::process::exit(128 + signal)
}

/// Signals blocked in the calling thread, to be taken one at a time with
/// [`Blocked::wait`] instead of by a handler: the guard's whole event loop, with no
/// async runtime and no code running in signal context.
pub struct Blocked {
    set: libc::sigset_t,
}

impl Blocked {
    /// Blocks `signals` in the calling thread (call it before any other thread exists,
    /// so that no other thread takes them). A child spawned through the standard library
    /// starts with an empty mask again (`std::process::Command` resets it).
    #[allow(unsafe_code)]
    pub fn block(signals: &[libc::c_int]) -> io::Result<Self> {
        let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigemptyset writes the set behind the pointer, which points to this
        // frame's `set`; it cannot fail for a valid pointer.
        unsafe { libc::sigemptyset(set.as_mut_ptr()) };
        // SAFETY: initialised by sigemptyset just above.
        let mut set = unsafe { set.assume_init() };
        for &signal in signals {
            // SAFETY: sigaddset writes only the set passed by reference.
            if unsafe { libc::sigaddset(&mut set, signal) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        // SAFETY: pthread_sigmask reads the set passed by reference and writes no old
        // mask (null pointer, as the manual allows).
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(Self { set })
    }

    /// Waits until one of the blocked signals is pending, takes it off the pending set
    /// and returns its number (a signal sent before the call is not lost: it waited).
    #[allow(unsafe_code)]
    pub fn wait(&self) -> io::Result<libc::c_int> {
        loop {
            // SAFETY: sigwaitinfo reads the set passed by reference; the info pointer is
            // null, which the manual allows (no siginfo is written).
            let signal = unsafe { libc::sigwaitinfo(&self.set, std::ptr::null_mut()) };
            if signal > 0 {
                return Ok(signal);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}
