//! Dropping capabilities before a confined command runs: the user namespace gives all of them to
//! the process that creates it, and root has them anyway.
#![allow(unsafe_code)]

/// Drops every capability: from the bounding set (so an exec cannot get them back, even as uid
/// 0), the ambient set, and the effective, permitted and inheritable sets. Without
/// CAP_SETPCAP (an ordinary user) the bounding set stays as it is; with no_new_privs and
/// nothing permitted, an exec cannot gain anything from it anyway.
pub(super) fn drop_all() -> std::io::Result<()> {
    use nix::libc;
    for cap in 0u32..64 {
        // SAFETY: prctl with integer arguments only.
        let r = unsafe {
            libc::prctl(
                libc::PR_CAPBSET_DROP,
                cap as libc::c_ulong,
                0u64,
                0u64,
                0u64,
            )
        };
        if r == -1 {
            let error = std::io::Error::last_os_error();
            match error.raw_os_error() {
                // Past the last capability this kernel knows.
                Some(libc::EINVAL) => break,
                // No CAP_SETPCAP: see above.
                Some(libc::EPERM) => break,
                _ => return Err(error),
            }
        }
    }
    // SAFETY: as above. Kernels before 4.3 have no ambient set: nothing to clear there.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0u64,
            0u64,
            0u64,
        )
    };
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset with a version-3 header and the two data words that version takes.
    let r = unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr()) };
    if r == -1 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
