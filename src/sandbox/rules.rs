//! Translation of a [`Spec`] into Landlock rights, the accounting of what a kernel can and cannot
//! enforce, and the one call that confines the current process.

use landlock::{
    ABI, Access as _, AccessFs, AccessNet, BitFlags, LandlockStatus, RestrictSelf, Ruleset,
    RulesetAttr as _, RulesetCreatedAttr as _, RulesetStatus, Scope, path_beneath_rules,
};

use super::{Access, Enforcement, SandboxError, Spec, Support};

/// The newest Landlock ABI this build knows: every ruleset handles all of its filesystem rights,
/// best effort, so a newer kernel refuses more and an older one still applies what it has.
const FS_ABI: ABI = ABI::V9;

/// The ABI that brought TCP bind/connect control.
const NET_ABI: ABI = ABI::V4;

/// Every ABI this build knows, oldest first (to name the ABI that brought a right).
const KNOWN_ABIS: [ABI; 9] = [
    ABI::V1,
    ABI::V2,
    ABI::V3,
    ABI::V4,
    ABI::V5,
    ABI::V6,
    ABI::V7,
    ABI::V8,
    ABI::V9,
];

/// Filesystem rights every ruleset handles (refuses unless a grant allows them).
pub(super) fn handled_fs() -> BitFlags<AccessFs> {
    AccessFs::from_all(FS_ABI)
}

/// The rights a kernel must enforce for filesystem enforcement to count as full.
///
/// Connecting to named UNIX sockets (`ResolveUnix`, ABI 9, Linux 7.1) is left out on purpose: it
/// is socket IPC rather than file access, and counting it would make every kernel before 7.1
/// "partial" and `required` unusable there. It is still handled where the kernel has it; before
/// that it is an unrestricted hole, like UDP (see the module documentation).
pub(super) fn required_fs() -> BitFlags<AccessFs> {
    handled_fs() & !AccessFs::ResolveUnix
}

impl Access {
    /// The Landlock rights this access grants at and beneath a directory (a file grant keeps only
    /// the file rights among them, see [`path_beneath_rules`]).
    pub(super) fn rights(self) -> BitFlags<AccessFs> {
        match self {
            Access::Read => AccessFs::from_read(FS_ABI),
            Access::ReadWrite => AccessFs::from_all(FS_ABI),
            Access::ReadWriteExisting => {
                AccessFs::from_read(FS_ABI)
                    | AccessFs::WriteFile
                    | AccessFs::Truncate
                    | AccessFs::IoctlDev
            }
        }
    }
}

/// What this kernel can enforce, from the crate's probe of it.
pub(super) fn probe() -> LandlockStatus {
    // A `RestrictSelf` with no flag configured and no_new_privs turned off makes no syscall in
    // `apply()` beyond the ABI version query that `default()` does: nothing is restricted. (The
    // unit test `support_leaves_this_process_alone` checks that.) This is the crate's only public
    // way to read its `LandlockStatus` without a raw syscall of our own.
    match RestrictSelf::default().no_new_privs(false).apply() {
        Ok(status) => status.landlock,
        // Cannot happen with nothing to apply; if it ever does, claim nothing.
        Err(_) => LandlockStatus::NotImplemented,
    }
}

impl Support {
    pub(super) fn from_status(status: LandlockStatus) -> Support {
        match status {
            LandlockStatus::NotEnabled | LandlockStatus::NotImplemented => Support {
                filesystem: Enforcement::None,
                network: Enforcement::None,
                abi: None,
            },
            LandlockStatus::Available {
                effective_abi,
                kernel_abi,
            } => {
                let enforced = AccessFs::from_all(effective_abi);
                let filesystem = if enforced.is_empty() {
                    Enforcement::None
                } else if enforced.contains(required_fs()) {
                    Enforcement::Full
                } else {
                    Enforcement::Partial
                };
                let network = if AccessNet::from_all(effective_abi).is_empty() {
                    Enforcement::None
                } else {
                    Enforcement::Full
                };
                Support {
                    filesystem,
                    network,
                    abi: Some(kernel_abi.unwrap_or(effective_abi as i32)),
                }
            }
        }
    }
}

/// Everything in a spec that a kernel with `status` cannot enforce, one sentence each; empty when
/// it can enforce all of it.
pub(super) fn shortfalls(network: bool, status: LandlockStatus) -> Vec<String> {
    let mut out = Vec::new();
    let abi = match status {
        LandlockStatus::NotEnabled => {
            out.push(
                "filesystem rules: Landlock is built into this kernel but not enabled at boot \
                 (it must be listed in the `lsm=` kernel parameter)"
                    .to_string(),
            );
            None
        }
        LandlockStatus::NotImplemented => {
            out.push(
                "filesystem rules: this kernel has no Landlock (Linux 5.13 or newer built with \
                 CONFIG_SECURITY_LANDLOCK is needed)"
                    .to_string(),
            );
            None
        }
        LandlockStatus::Available { effective_abi, .. } => Some(effective_abi),
    };
    if let Some(abi) = abi {
        let missing = required_fs() & !AccessFs::from_all(abi);
        if !missing.is_empty() {
            let names: Vec<String> = missing.iter().map(describe).collect();
            out.push(format!(
                "filesystem rules: this kernel (Landlock ABI {abi}) cannot control {}",
                names.join(", ")
            ));
        }
    }
    let tcp_enforced = abi.is_some_and(|abi| !AccessNet::from_all(abi).is_empty());
    if !network && !tcp_enforced {
        let has = abi.map_or_else(|| "none".to_string(), |abi| format!("ABI {abi}"));
        out.push(format!(
            "network: false: refusing TCP connect and bind needs Landlock ABI {NET_ABI} \
             (Linux 6.7); this kernel has {has}"
        ));
    }
    out
}

/// The ABI that brought scoping of abstract UNIX sockets (and signals).
const SCOPE_ABI: ABI = ABI::V6;

/// Why a command under Landlock alone without network could still connect to abstract UNIX
/// sockets outside the sandbox on a kernel with `status`; `None` where Landlock scopes them.
///
/// Not counted among the [`shortfalls`] that make `sandbox: required` refuse: like UDP, it is
/// traffic `network: false` cannot fully cut with Landlock alone, and counting it would refuse
/// every kernel before 6.12.
pub(super) fn abstract_socket_shortfall(status: LandlockStatus) -> Option<String> {
    let scoped = match status {
        LandlockStatus::Available { effective_abi, .. } => effective_abi >= SCOPE_ABI,
        LandlockStatus::NotEnabled | LandlockStatus::NotImplemented => false,
    };
    (!scoped).then(|| {
        let has = match status {
            LandlockStatus::Available { effective_abi, .. } => format!("ABI {effective_abi}"),
            _ => "none".to_string(),
        };
        format!(
            "network: false: abstract UNIX sockets outside the sandbox (X11, D-Bus and the \
             like) stay reachable: scoping them needs Landlock ABI {SCOPE_ABI} (Linux 6.12); \
             this kernel has {has}"
        )
    })
}

/// A right in words, with the ABI that brought it.
fn describe(right: AccessFs) -> String {
    let what = match right {
        AccessFs::Execute => "executing files",
        AccessFs::WriteFile => "writing files",
        AccessFs::ReadFile => "reading files",
        AccessFs::ReadDir => "listing directories",
        AccessFs::RemoveDir => "removing directories",
        AccessFs::RemoveFile => "removing files",
        AccessFs::MakeChar => "creating character devices",
        AccessFs::MakeDir => "creating directories",
        AccessFs::MakeReg => "creating files",
        AccessFs::MakeSock => "creating UNIX sockets",
        AccessFs::MakeFifo => "creating named pipes",
        AccessFs::MakeBlock => "creating block devices",
        AccessFs::MakeSym => "creating symbolic links",
        // Without it the kernel refuses every cross-directory rename and link, granted or not.
        AccessFs::Refer => "renaming or linking across directories (always refused without it)",
        AccessFs::Truncate => "truncating files",
        AccessFs::IoctlDev => "ioctl on device files",
        AccessFs::ResolveUnix => "connecting to named UNIX sockets",
        _ => "a right this build has no name for",
    };
    match KNOWN_ABIS
        .iter()
        .find(|abi| AccessFs::from_all(**abi).contains(right))
    {
        Some(abi) => format!("{what} (ABI {abi})"),
        None => what.to_string(),
    }
}

/// Confines the current thread (and what it execs) to `spec`'s grants, setting no_new_privs;
/// refuses TCP connect and bind when `restrict_tcp`. With `required`, refuses before touching
/// anything if the kernel cannot enforce all of it.
pub(super) fn confine(spec: &Spec, required: bool, restrict_tcp: bool) -> Result<(), SandboxError> {
    if required {
        let missing = shortfalls(!restrict_tcp, probe());
        if !missing.is_empty() {
            return Err(SandboxError::NotEnforceable { missing });
        }
    }

    // Signals only within the sandbox (ABI 6; skipped on older kernels): a command cannot kill
    // the helper that reaps what it starts, nor nop itself.
    let mut ruleset = Ruleset::default()
        .handle_access(handled_fs())?
        .scope(Scope::Signal)?;
    if !spec.network {
        // Abstract UNIX sockets need no file, so no file rule reaches them: without network,
        // none created outside the sandbox may be connected to (ABI 6, Linux 6.12; skipped on
        // older kernels and reported by `abstract_socket_shortfall`). In a network namespace
        // they are out of reach already; this holds there too.
        ruleset = ruleset.scope(Scope::AbstractUnixSocket)?;
    }
    if restrict_tcp {
        // Handled with no rule at all: every TCP bind and connect is refused.
        ruleset = ruleset.handle_access(AccessNet::from_all(NET_ABI))?;
    }
    let mut created = ruleset.create()?.no_new_privs(true);
    for grant in &spec.grants {
        // `path_beneath_rules` skips paths it cannot open (a grant for something that does not
        // exist yet cannot be expressed) and keeps only file rights on non-directories, which
        // the kernel would otherwise reject with EINVAL.
        created = created.add_rules(path_beneath_rules([&grant.path], grant.access.rights()))?;
    }
    let status = created.restrict_self()?;

    if !status.no_new_privs {
        return Err(SandboxError::NoNewPrivs);
    }
    if required {
        // Account again with the status of the ruleset actually applied. `PartiallyEnforced` is
        // expected on kernels without `ResolveUnix`; `shortfalls` says whether anything else is
        // missing.
        let mut missing = shortfalls(!restrict_tcp, status.landlock);
        if status.ruleset == RulesetStatus::NotEnforced && missing.is_empty() {
            missing.push("the kernel enforced none of the rules".to_string());
        }
        if !missing.is_empty() {
            return Err(SandboxError::NotEnforceable { missing });
        }
    }
    Ok(())
}
