//! The seccomp filter every caged command runs under: one table of the
//! syscalls an agent never needs, each with the reason it is refused.
//!
//! The list is Docker's default profile read as a deny list (everything
//! that profile refuses a container without added capabilities), plus the
//! process-inspection calls Docker allows and bl does not (`ptrace`,
//! `process_vm_*`) and the `TIOCSTI` ioctl. A refused call fails with EPERM;
//! `clone3` fails with ENOSYS, as in Docker, so that C libraries fall back to
//! `clone`, whose namespace flags a filter can see.

use std::collections::{BTreeMap, BTreeSet};

use nix::libc;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// When a syscall in the table is refused.
#[derive(Debug, Clone, Copy)]
pub enum When {
    /// Every call.
    Always,
    /// When argument `arg` has any of the bits in `mask` set.
    AnyBit { arg: u8, mask: u64 },
    /// When argument `arg` equals `value`.
    Equals { arg: u8, value: u64 },
    /// When argument `arg` is at least `value`.
    AtLeast { arg: u8, value: u64 },
    /// When argument `arg` is none of `values`.
    NoneOf { arg: u8, values: &'static [u64] },
}

/// How a refused call fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// EPERM: not allowed.
    Denied,
    /// ENOSYS: as if the kernel did not have it, so callers fall back.
    Missing,
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct DeniedSyscall {
    pub name: &'static str,
    pub number: libc::c_long,
    pub when: When,
    pub refusal: Refusal,
    pub why: &'static str,
}

const fn always(name: &'static str, number: libc::c_long, why: &'static str) -> DeniedSyscall {
    DeniedSyscall {
        name,
        number,
        when: When::Always,
        refusal: Refusal::Denied,
        why,
    }
}

const fn only(
    name: &'static str,
    number: libc::c_long,
    when: When,
    why: &'static str,
) -> DeniedSyscall {
    DeniedSyscall {
        name,
        number,
        when,
        refusal: Refusal::Denied,
        why,
    }
}

/// CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET:
/// the flags that make a new namespace (Docker's mask, 0x7E020000).
pub const NAMESPACE_FLAGS: u64 = 0x7E02_0000;

/// S_ISUID | S_ISGID.
const SET_ID_BITS: u64 = 0o6000;
const SET_ID: &str = "a set-id bit on a file that lands owned by the workspace's owner";
const SET_ID_MODE_ARG1: When = When::AnyBit {
    arg: 1,
    mask: SET_ID_BITS,
};
const SET_ID_MODE_ARG2: When = When::AnyBit {
    arg: 2,
    mask: SET_ID_BITS,
};

/// personality(2) values Docker allows: PER_LINUX, UNAME26, PER_LINUX32,
/// both, and the query.
const PERSONALITIES: &[u64] = &[0x0, 0x8, 0x20000, 0x20008, 0xffff_ffff];

// The address families an agent never needs: DECnet, Econet, ATM SVC,
// IrDA, WAN pipe, ISDN, CAIF, AF_ALG, vsock; and everything from 46 up.
const AF_DENIED: [u64; 9] = [12, 19, 20, 23, 25, 34, 37, 38, 40];

// ioctl request numbers are typed differently between targets.
#[allow(clippy::unnecessary_cast)]
const TIOCSTI: u64 = libc::TIOCSTI as u64;

/// The syscalls no caged command may make, on every architecture.
pub const DENIED: &[DeniedSyscall] = &[
    // Reading or steering other processes.
    always(
        "ptrace",
        libc::SYS_ptrace,
        "tracing a process reads and rewrites it",
    ),
    always(
        "process_vm_readv",
        libc::SYS_process_vm_readv,
        "reads another process's memory",
    ),
    always(
        "process_vm_writev",
        libc::SYS_process_vm_writev,
        "writes another process's memory",
    ),
    always(
        "kcmp",
        libc::SYS_kcmp,
        "compares other processes' kernel objects",
    ),
    always(
        "pidfd_getfd",
        libc::SYS_pidfd_getfd,
        "steals a file descriptor from another process",
    ),
    always(
        "process_madvise",
        libc::SYS_process_madvise,
        "acts on another process's memory",
    ),
    only(
        "ioctl(TIOCSTI)",
        libc::SYS_ioctl,
        When::Equals {
            arg: 1,
            value: TIOCSTI,
        },
        "pushes keystrokes into a terminal someone else reads",
    ),
    // The kernel keyring is not namespaced.
    always(
        "keyctl",
        libc::SYS_keyctl,
        "the kernel keyring is shared with the host",
    ),
    always(
        "add_key",
        libc::SYS_add_key,
        "the kernel keyring is shared with the host",
    ),
    always(
        "request_key",
        libc::SYS_request_key,
        "the kernel keyring is shared with the host",
    ),
    // Mounts and namespaces.
    always(
        "mount",
        libc::SYS_mount,
        "mounting changes what the cage shows",
    ),
    always(
        "umount2",
        libc::SYS_umount2,
        "unmounting uncovers what the cage hides",
    ),
    always(
        "pivot_root",
        libc::SYS_pivot_root,
        "switches the root file system",
    ),
    always("fsopen", libc::SYS_fsopen, "the new mount API"),
    always("fsconfig", libc::SYS_fsconfig, "the new mount API"),
    always("fsmount", libc::SYS_fsmount, "the new mount API"),
    always("fspick", libc::SYS_fspick, "the new mount API"),
    always("move_mount", libc::SYS_move_mount, "the new mount API"),
    always("open_tree", libc::SYS_open_tree, "the new mount API"),
    always(
        "mount_setattr",
        libc::SYS_mount_setattr,
        "the new mount API",
    ),
    always("setns", libc::SYS_setns, "joins another namespace"),
    always(
        "unshare",
        libc::SYS_unshare,
        "makes new namespaces, where a process holds every capability",
    ),
    only(
        "clone(namespace flags)",
        libc::SYS_clone,
        When::AnyBit {
            arg: 0,
            mask: NAMESPACE_FLAGS,
        },
        "makes new namespaces, where a process holds every capability",
    ),
    DeniedSyscall {
        name: "clone3",
        number: libc::SYS_clone3,
        when: When::Always,
        refusal: Refusal::Missing,
        why: "its flags sit behind a pointer no filter can read; ENOSYS makes callers use clone",
    },
    always("chroot", libc::SYS_chroot, "changes the root directory"),
    always(
        "sethostname",
        libc::SYS_sethostname,
        "changes the host's name",
    ),
    always(
        "setdomainname",
        libc::SYS_setdomainname,
        "changes the host's domain name",
    ),
    // The kernel itself.
    always("init_module", libc::SYS_init_module, "loads kernel code"),
    always("finit_module", libc::SYS_finit_module, "loads kernel code"),
    always(
        "delete_module",
        libc::SYS_delete_module,
        "unloads kernel code",
    ),
    always("kexec_load", libc::SYS_kexec_load, "boots another kernel"),
    always(
        "kexec_file_load",
        libc::SYS_kexec_file_load,
        "boots another kernel",
    ),
    always("reboot", libc::SYS_reboot, "reboots the host"),
    always("swapon", libc::SYS_swapon, "host-wide swap"),
    always("swapoff", libc::SYS_swapoff, "host-wide swap"),
    always("bpf", libc::SYS_bpf, "loads programs into the kernel"),
    always(
        "perf_event_open",
        libc::SYS_perf_event_open,
        "kernel and host performance data; a frequent exploit path",
    ),
    always(
        "userfaultfd",
        libc::SYS_userfaultfd,
        "stalls the kernel mid-copy; a frequent exploit aid",
    ),
    always(
        "io_uring_setup",
        libc::SYS_io_uring_setup,
        "a large kernel surface that seccomp cannot see into",
    ),
    always(
        "io_uring_enter",
        libc::SYS_io_uring_enter,
        "a large kernel surface that seccomp cannot see into",
    ),
    always(
        "io_uring_register",
        libc::SYS_io_uring_register,
        "a large kernel surface that seccomp cannot see into",
    ),
    always(
        "syslog",
        libc::SYS_syslog,
        "the kernel log leaks host details",
    ),
    always(
        "lookup_dcookie",
        libc::SYS_lookup_dcookie,
        "kernel profiling data",
    ),
    always(
        "fanotify_init",
        libc::SYS_fanotify_init,
        "watches file events system-wide",
    ),
    always("quotactl", libc::SYS_quotactl, "changes disk quotas"),
    always("quotactl_fd", libc::SYS_quotactl_fd, "changes disk quotas"),
    always("acct", libc::SYS_acct, "host-wide process accounting"),
    always("vhangup", libc::SYS_vhangup, "hangs up terminals"),
    always("nfsservctl", libc::SYS_nfsservctl, "the kernel NFS server"),
    // Files by handle skip every path check (the "shocker" breakout).
    always(
        "open_by_handle_at",
        libc::SYS_open_by_handle_at,
        "opens files by handle, around every path check",
    ),
    always(
        "name_to_handle_at",
        libc::SYS_name_to_handle_at,
        "makes the handles open_by_handle_at uses",
    ),
    // The clock is not namespaced.
    always(
        "settimeofday",
        libc::SYS_settimeofday,
        "sets the host's clock",
    ),
    always(
        "clock_settime",
        libc::SYS_clock_settime,
        "sets the host's clock",
    ),
    // NUMA placement of memory.
    always("mbind", libc::SYS_mbind, "NUMA memory policy"),
    always(
        "set_mempolicy",
        libc::SYS_set_mempolicy,
        "NUMA memory policy",
    ),
    always(
        "get_mempolicy",
        libc::SYS_get_mempolicy,
        "NUMA memory policy",
    ),
    always(
        "set_mempolicy_home_node",
        libc::SYS_set_mempolicy_home_node,
        "NUMA memory policy",
    ),
    always(
        "move_pages",
        libc::SYS_move_pages,
        "moves other processes' pages between NUMA nodes",
    ),
    always(
        "migrate_pages",
        libc::SYS_migrate_pages,
        "moves other processes' pages between NUMA nodes",
    ),
    // Set-uid and set-gid bits. Files a caged command writes land on disk
    // owned by the workspace's owner (often root); a set-id bit on one
    // would hand that owner's rights to whoever runs it later.
    only("fchmod(set-id)", libc::SYS_fchmod, SET_ID_MODE_ARG1, SET_ID),
    only(
        "fchmodat(set-id)",
        libc::SYS_fchmodat,
        SET_ID_MODE_ARG2,
        SET_ID,
    ),
    only(
        "fchmodat2(set-id)",
        libc::SYS_fchmodat2,
        SET_ID_MODE_ARG2,
        SET_ID,
    ),
    only(
        "openat(set-id)",
        libc::SYS_openat,
        When::AnyBit {
            arg: 3,
            mask: SET_ID_BITS,
        },
        SET_ID,
    ),
    only(
        "mknodat(set-id)",
        libc::SYS_mknodat,
        SET_ID_MODE_ARG2,
        SET_ID,
    ),
    DeniedSyscall {
        name: "openat2",
        number: libc::SYS_openat2,
        when: When::Always,
        refusal: Refusal::Missing,
        why: "its mode sits behind a pointer no filter can read; ENOSYS makes callers use openat",
    },
    // Newer than the libc crate's tables; numbered alike on every arch.
    always("lsm_get_self_attr", 459, "security-module attributes"),
    always("lsm_set_self_attr", 460, "security-module attributes"),
    always("lsm_list_modules", 461, "security-module attributes"),
    always("open_tree_attr", 467, "the new mount API"),
    // Execution domains other than Linux's.
    only(
        "personality",
        libc::SYS_personality,
        When::NoneOf {
            arg: 0,
            values: PERSONALITIES,
        },
        "other execution domains change how the kernel reads a program",
    ),
    // Sockets of families an agent never needs (vsock reaches the hypervisor).
    only(
        "socket(family ≥ 46)",
        libc::SYS_socket,
        When::AtLeast { arg: 0, value: 46 },
        "address families no agent needs",
    ),
];

/// The syscalls refused on x86_64 only (they do not exist elsewhere).
#[cfg(target_arch = "x86_64")]
pub const DENIED_ARCH: &[DeniedSyscall] = &[
    always("iopl", libc::SYS_iopl, "raw hardware I/O ports"),
    always("ioperm", libc::SYS_ioperm, "raw hardware I/O ports"),
    always("_sysctl", libc::SYS__sysctl, "the old sysctl interface"),
    always("uselib", libc::SYS_uselib, "an obsolete loader"),
    always("ustat", libc::SYS_ustat, "obsolete"),
    always("sysfs", libc::SYS_sysfs, "obsolete"),
    always("create_module", 174, "obsolete module loading"),
    always("get_kernel_syms", 177, "obsolete module loading"),
    always("query_module", 178, "obsolete module loading"),
    only("chmod(set-id)", libc::SYS_chmod, SET_ID_MODE_ARG1, SET_ID),
    only("open(set-id)", libc::SYS_open, SET_ID_MODE_ARG2, SET_ID),
    only("creat(set-id)", libc::SYS_creat, SET_ID_MODE_ARG1, SET_ID),
    only("mknod(set-id)", libc::SYS_mknod, SET_ID_MODE_ARG1, SET_ID),
    always("afs_syscall", libc::SYS_afs_syscall, "unimplemented slot"),
    always("getpmsg", libc::SYS_getpmsg, "unimplemented slot"),
    always("putpmsg", libc::SYS_putpmsg, "unimplemented slot"),
    always("tuxcall", libc::SYS_tuxcall, "unimplemented slot"),
    always("security", libc::SYS_security, "unimplemented slot"),
    always("vserver", libc::SYS_vserver, "unimplemented slot"),
];

#[cfg(not(target_arch = "x86_64"))]
pub const DENIED_ARCH: &[DeniedSyscall] = &[];

/// Every row that applies on this machine's architecture.
pub fn table() -> impl Iterator<Item = &'static DeniedSyscall> {
    DENIED
        .iter()
        .chain(DENIED_ARCH)
        .chain(SOCKET_FAMILIES.iter())
}

const fn socket_family(family: u64) -> DeniedSyscall {
    only(
        "socket(family)",
        libc::SYS_socket,
        When::Equals {
            arg: 0,
            value: family,
        },
        "address families no agent needs",
    )
}

const SOCKET_FAMILIES: [DeniedSyscall; 9] = [
    socket_family(AF_DENIED[0]),
    socket_family(AF_DENIED[1]),
    socket_family(AF_DENIED[2]),
    socket_family(AF_DENIED[3]),
    socket_family(AF_DENIED[4]),
    socket_family(AF_DENIED[5]),
    socket_family(AF_DENIED[6]),
    socket_family(AF_DENIED[7]),
    socket_family(AF_DENIED[8]),
];

/// Why the filters could not be compiled: a fault in the table or in this
/// build, never in the caller's input; a sandbox that meets it refuses to
/// run anything.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("seccomp: {0}")]
    Backend(#[from] seccompiler::BackendError),
    #[error("seccomp: {0}")]
    Target(String),
    #[error("seccomp table: {0} is refused both always and conditionally")]
    Contradiction(&'static str),
    #[error("seccomp: the programs cannot be chained: {0}")]
    Chain(&'static str),
    #[error("seccomp: the filter has {0} instructions, past the kernel's {MAX_INSTRUCTIONS}")]
    TooLong(usize),
}

fn condition(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, SeccompError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Qword, op, value).map_err(SeccompError::from)
}

/// The rules (ORed) under which `row` refuses its call; empty means always.
fn rules(row: &DeniedSyscall) -> Result<Vec<SeccompRule>, SeccompError> {
    let conditions = match row.when {
        When::Always => return Ok(Vec::new()),
        When::AnyBit { arg, mask } => {
            // One rule per bit: any bit set matches.
            let mut out = Vec::new();
            for bit in (0..64).map(|i| 1u64 << i).filter(|b| mask & b != 0) {
                out.push(
                    SeccompRule::new(vec![condition(arg, SeccompCmpOp::MaskedEq(bit), bit)?])
                        .map_err(SeccompError::from)?,
                );
            }
            return Ok(out);
        }
        // The ioctl request and the socket family are ints: compare the low
        // 32 bits only, as the kernel reads them.
        When::Equals { arg, value } => vec![
            SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value)
                .map_err(SeccompError::from)?,
        ],
        When::AtLeast { arg, value } => vec![
            SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Ge, value)
                .map_err(SeccompError::from)?,
        ],
        When::NoneOf { arg, values } => values
            .iter()
            .map(|v| SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, *v))
            .collect::<Result<_, _>>()
            .map_err(SeccompError::from)?,
    };
    Ok(vec![
        SeccompRule::new(conditions).map_err(SeccompError::from)?,
    ])
}

// c_long is i64 on the 64-bit targets seccompiler supports.
#[allow(clippy::unnecessary_cast)]
fn syscall_number(row: &DeniedSyscall) -> i64 {
    row.number as i64
}

fn compile(refusal: Refusal, errno: u32) -> Result<Vec<Instruction>, SeccompError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| SeccompError::Target(e.to_string()))?;
    let mut by_number: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let mut unconditional = Vec::new();
    for row in table().filter(|r| r.refusal == refusal) {
        let rules = rules(row)?;
        if rules.is_empty() {
            unconditional.push(row);
        }
        by_number
            .entry(syscall_number(row))
            .or_default()
            .extend(rules);
    }
    // An empty rule list refuses every call; rules next to it would narrow it.
    if let Some(row) = unconditional
        .iter()
        .find(|r| !by_number[&syscall_number(r)].is_empty())
    {
        return Err(SeccompError::Contradiction(row.name));
    }
    let filter = SeccompFilter::new(
        by_number,
        SeccompAction::Allow,
        SeccompAction::Errno(errno),
        arch,
    )
    .map_err(SeccompError::from)?;
    let program: BpfProgram = filter.try_into().map_err(SeccompError::from)?;
    Ok(program
        .into_iter()
        .map(|i| (i.code, i.jt, i.jf, i.k))
        .collect())
}

/// One cBPF instruction: (code, jump-if-true, jump-if-false, constant).
type Instruction = (u16, u8, u8, u32);

const RETURN: u16 = 0x06; // BPF_RET | BPF_K
const RET_ALLOW: u32 = 0x7fff_0000;
const JUMP_ALWAYS: u16 = 0x05; // BPF_JMP | BPF_JA
/// The kernel's limit on one filter's length (BPF_MAXINSNS).
const MAX_INSTRUCTIONS: usize = 4096;

/// The programs as one: wherever a program would allow the call, it jumps
/// to the start of the next instead, so the first refusal answers and
/// only a call every program allows is allowed. With programs that refuse
/// disjoint calls this is what the kernel does with them stacked, at the
/// cost of one filter: one compile per cage and one run per syscall.
fn chain(programs: Vec<Vec<Instruction>>) -> Result<Vec<Instruction>, SeccompError> {
    let count = programs.len();
    let mut chained = Vec::new();
    for (index, program) in programs.into_iter().enumerate() {
        let last = index + 1 == count;
        let length = program.len();
        for (at, (code, jt, jf, k)) in program.into_iter().enumerate() {
            // A return of the accumulator (or any non-constant return)
            // could allow a call this rewrite cannot see.
            if code & 0x07 == RETURN & 0x07 && code != RETURN {
                return Err(SeccompError::Chain("a return that is not a constant"));
            }
            let allows = code == RETURN && k == RET_ALLOW;
            chained.push(if allows && !last {
                (JUMP_ALWAYS, 0, 0, (length - at - 1) as u32)
            } else {
                (code, jt, jf, k)
            });
        }
    }
    Ok(chained)
}

/// cBPF instructions (code, jump-if-true, jump-if-false, constant) as the
/// raw `struct sock_filter` array bwrap reads.
fn encode(program: impl IntoIterator<Item = Instruction>) -> Vec<u8> {
    let mut bytes = Vec::new();
    for (code, jt, jf, k) in program {
        bytes.extend_from_slice(&code.to_ne_bytes());
        bytes.push(jt);
        bytes.push(jf);
        bytes.extend_from_slice(&k.to_ne_bytes());
    }
    bytes
}

/// The first syscall number newer than this table: Docker's profile is an
/// allow list, so a syscall added to Linux after it is refused there; here
/// every native call numbered from this one up answers ENOSYS (as runc
/// answers syscalls newer than its profile), so callers fall back to older
/// calls.
pub const FIRST_UNREVIEWED_SYSCALL: u32 = 468;

const LOAD_WORD: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JUMP_IF_EQUAL: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JUMP_IF_AT_LEAST: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const RET_ERRNO: u32 = 0x0005_0000;

/// The audit tag of a call through this build's own syscall ABI.
fn native_arch() -> Result<u32, SeccompError> {
    match std::env::consts::ARCH {
        "x86_64" => Ok(0xc000_003e),
        "aarch64" => Ok(0xc000_00b7),
        "riscv64" => Ok(0xc000_00f3),
        other => Err(SeccompError::Target(format!("no audit tag for {other}"))),
    }
}

/// The checks no row can make, for a native call: on x86_64 every call
/// through the x32 ABI (numbers with bit 30 set and the x86_64 tag, which
/// no row would match) gets EPERM, as libseccomp and Docker refuse them,
/// and numbers newer than the table get ENOSYS. With the index of the jump
/// a foreign call takes past them: its distance is for the caller to set.
fn guard_head() -> Result<(Vec<Instruction>, usize), SeccompError> {
    // seccomp_data: nr at offset 0, arch at offset 4.
    let mut head = vec![
        (LOAD_WORD, 0, 0, 4),
        (JUMP_IF_EQUAL, 1, 0, native_arch()?),
        // Lands outside any program until the caller sets it: the kernel
        // refuses the filter rather than run a foreign call through the
        // native checks.
        (JUMP_ALWAYS, 0, 0, u32::MAX),
        (LOAD_WORD, 0, 0, 0),
    ];
    #[cfg(target_arch = "x86_64")]
    {
        const X32_SYSCALL_BIT: u32 = 0x4000_0000;
        head.push((JUMP_IF_AT_LEAST, 0, 1, X32_SYSCALL_BIT));
        head.push((RETURN, 0, 0, RET_ERRNO | libc::EPERM as u32));
    }
    head.push((JUMP_IF_AT_LEAST, 0, 1, FIRST_UNREVIEWED_SYSCALL));
    head.push((RETURN, 0, 0, RET_ERRNO | libc::ENOSYS as u32));
    Ok((head, 2))
}

/// The first program of the chain: the guard's checks, then a binary
/// search over the numbers some row of the table names (`named`, refused
/// always or under a condition). A native call no row names is allowed at
/// once, by a jump past the table's programs (`tables_len` instructions
/// after this one) to the allow that [`program`] puts last; a call some row
/// names, and every foreign call, go on to the table's programs, which
/// would have allowed the others too, one comparison per row later. So it
/// is not a program that can stand alone.
///
/// The search is for the kernel: when a filter is installed it runs it for
/// every syscall number to learn which calls it may allow without running
/// it, and on a linear program that took about 0.24 ms of the 0.31 ms each
/// cage spent installing its filter (95,000 instructions stepped through).
fn range_guard(named: &BTreeSet<u32>, tables_len: usize) -> Result<Vec<Instruction>, SeccompError> {
    let (mut program, foreign_jump) = guard_head()?;
    program.extend(Search::over(named).emit());
    let end = program.len();
    program.push((RETURN, 0, 0, RET_ALLOW));
    program[foreign_jump].3 = (end - foreign_jump - 1) as u32;
    for (at, instruction) in program.iter_mut().enumerate() {
        let to = match *instruction {
            TO_THE_TABLES => end,
            ALLOW_AT_ONCE => end + 1 + tables_len,
            _ => continue,
        };
        *instruction = (JUMP_ALWAYS, 0, 0, (to - at - 1) as u32);
    }
    Ok(program)
}

/// The search's leaves, as placeholders until the program's length is
/// known: on to the table's programs, or allowed at once.
const TO_THE_TABLES: Instruction = (JUMP_ALWAYS, 0xff, 0xfe, u32::MAX);
const ALLOW_AT_ONCE: Instruction = (JUMP_ALWAYS, 0xff, 0xff, u32::MAX);

/// A binary search over syscall numbers, whose leaves are runs of numbers
/// either all named by the table or all not.
enum Search {
    Named,
    Unnamed,
    /// Numbers below `at` to `below`, the rest to `rest`.
    Split {
        at: u32,
        below: Box<Search>,
        rest: Box<Search>,
    },
}

impl Search {
    fn over(named: &BTreeSet<u32>) -> Search {
        // Where each run starts, and whether the table names it.
        let mut runs: Vec<(u32, bool)> = Vec::new();
        for number in 0..FIRST_UNREVIEWED_SYSCALL {
            let is_named = named.contains(&number);
            if runs.last().is_none_or(|&(_, last)| last != is_named) {
                runs.push((number, is_named));
            }
        }
        Search::balanced(&runs)
    }

    fn balanced(runs: &[(u32, bool)]) -> Search {
        match runs {
            [(_, true)] => Search::Named,
            [(_, false)] | [] => Search::Unnamed,
            _ => {
                let middle = runs.len() / 2;
                Search::Split {
                    at: runs[middle].0,
                    below: Box::new(Search::balanced(&runs[..middle])),
                    rest: Box::new(Search::balanced(&runs[middle..])),
                }
            }
        }
    }

    /// The search's instructions, its leaves as placeholders.
    fn emit(&self) -> Vec<Instruction> {
        match self {
            Search::Named => vec![TO_THE_TABLES],
            Search::Unnamed => vec![ALLOW_AT_ONCE],
            Search::Split { at, below, rest } => {
                let rest = rest.emit();
                // At least `at`: on to `rest`, just after; else past it,
                // by a jump of its own when a branch's 255 cannot reach.
                let mut out = match u8::try_from(rest.len()) {
                    Ok(past) => vec![(JUMP_IF_AT_LEAST, 0, past, *at)],
                    Err(_) => vec![
                        (JUMP_IF_AT_LEAST, 1, 0, *at),
                        (JUMP_ALWAYS, 0, 0, rest.len() as u32),
                    ],
                };
                out.extend(rest);
                out.extend(below.emit());
                out
            }
        }
    }
}

/// The filter as one raw cBPF program for `bwrap --add-seccomp-fd`: the
/// range guard, then the table's ENOSYS rows, then its EPERM rows, chained.
/// Stacked as three filters, the kernel would answer a call two of them
/// refuse with the errno of the one installed last; the chain asks them in
/// that order (last installed first), so it answers the same. Refusals
/// never differ in precedence: the only stronger one, killing a call of a
/// foreign architecture, comes from both table programs alike, and the
/// range guard lets such a call through to them.
pub fn program() -> Result<Vec<u8>, SeccompError> {
    let missing = compile(Refusal::Missing, libc::ENOSYS as u32)?;
    let denied = compile(Refusal::Denied, libc::EPERM as u32)?;
    let named: BTreeSet<u32> = table().map(|row| row.number as u32).collect();
    let guard = range_guard(&named, missing.len() + denied.len())?;
    let mut chained = chain(vec![guard, missing, denied])?;
    // Where the guard's search allows a call the table does not name.
    chained.push((RETURN, 0, 0, RET_ALLOW));
    if chained.len() > MAX_INSTRUCTIONS {
        return Err(SeccompError::TooLong(chained.len()));
    }
    Ok(encode(chained))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_every_syscall_the_issue_lists_and_each_has_a_reason() {
        let names: Vec<&str> = table().map(|r| r.name).collect();
        for required in [
            "keyctl",
            "add_key",
            "request_key",
            "mount",
            "umount2",
            "pivot_root",
            "swapon",
            "swapoff",
            "reboot",
            "init_module",
            "finit_module",
            "delete_module",
            "kexec_load",
            "bpf",
            "perf_event_open",
            "userfaultfd",
            "open_by_handle_at",
            "name_to_handle_at",
            "setns",
            "unshare",
            "clone(namespace flags)",
            "clone3",
            "acct",
            "settimeofday",
            "clock_settime",
            "ptrace",
            "process_vm_readv",
            "process_vm_writev",
            "ioctl(TIOCSTI)",
        ] {
            assert!(names.contains(&required), "{required} is not in the table");
        }
        assert!(table().all(|r| !r.why.is_empty()));
    }

    #[test]
    fn the_program_compiles_into_one_filter_the_kernel_accepts_by_length() {
        let program = program().unwrap();
        assert!(!program.is_empty() && program.len().is_multiple_of(8));
        assert!(program.len() / 8 <= MAX_INSTRUCTIONS);
    }

    #[test]
    fn a_chain_jumps_from_each_allow_to_the_next_program_and_keeps_the_last() {
        let deny = (RETURN, 0, 0, 0x0005_0001);
        let allow = (RETURN, 0, 0, RET_ALLOW);
        let load = (0x20, 0, 0, 0);
        let chained = chain(vec![vec![load, allow, deny], vec![load, deny, allow]]).unwrap();
        assert_eq!(
            chained,
            vec![
                load,
                // From index 1, past the one instruction left, to index 3.
                (JUMP_ALWAYS, 0, 0, 1),
                deny,
                load,
                deny,
                allow
            ]
        );
    }

    const RET_KILL_PROCESS: u32 = 0x8000_0000;

    /// What the kernel answers for a call: a cBPF interpreter for the
    /// instructions these programs use, and how many it stepped through.
    fn answer(program: &[Instruction], data: &[u32; 16]) -> (u32, usize) {
        let (mut accumulator, mut at, mut steps) = (0u32, 0usize, 0usize);
        loop {
            let (code, jt, jf, k) = program[at];
            steps += 1;
            at += 1;
            match code {
                LOAD_WORD => accumulator = data[k as usize / 4],
                0x54 => accumulator &= k, // BPF_ALU | BPF_AND | BPF_K
                RETURN => return (k, steps),
                JUMP_ALWAYS => at += k as usize,
                _ => {
                    let taken = match code {
                        JUMP_IF_EQUAL => accumulator == k,
                        JUMP_IF_AT_LEAST => accumulator >= k,
                        0x25 => accumulator > k,      // BPF_JGT
                        0x45 => accumulator & k != 0, // BPF_JSET
                        other => panic!("instruction {other:#x} at {}", at - 1),
                    };
                    at += if taken { jt } else { jf } as usize;
                }
            }
        }
    }

    fn decoded(bytes: &[u8]) -> Vec<Instruction> {
        bytes
            .chunks(8)
            .map(|b| {
                let code = u16::from_ne_bytes([b[0], b[1]]);
                (
                    code,
                    b[2],
                    b[3],
                    u32::from_ne_bytes([b[4], b[5], b[6], b[7]]),
                )
            })
            .collect()
    }

    /// The program as it was before the search: the range guard's checks,
    /// then every row in turn.
    fn linear_program() -> Vec<Instruction> {
        let (mut guard, foreign_jump) = guard_head().unwrap();
        guard[foreign_jump].3 = (guard.len() - foreign_jump - 1) as u32;
        guard.push((RETURN, 0, 0, RET_ALLOW));
        chain(vec![
            guard,
            compile(Refusal::Missing, libc::ENOSYS as u32).unwrap(),
            compile(Refusal::Denied, libc::EPERM as u32).unwrap(),
        ])
        .unwrap()
    }

    /// What the kernel checks of a classic program before it takes it
    /// (`bpf_check_classic`), for the instructions these programs use:
    /// every jump lands inside it, and it ends with a return.
    fn assert_the_kernel_would_take(program: &[Instruction]) {
        assert!(program.len() <= MAX_INSTRUCTIONS);
        assert_eq!(program.last().map(|i| i.0), Some(RETURN));
        for (at, &(code, jt, jf, k)) in program.iter().enumerate() {
            let targets = match code {
                JUMP_ALWAYS => vec![k as usize],
                JUMP_IF_EQUAL | JUMP_IF_AT_LEAST | 0x25 | 0x45 => vec![jt as usize, jf as usize],
                _ => continue,
            };
            for offset in targets {
                assert!(
                    at + 1 + offset < program.len(),
                    "the jump at {at} lands outside"
                );
            }
        }
    }

    /// Every argument value a row compares with, and a few others.
    fn argument_values() -> Vec<u64> {
        let mut values = vec![0, 1, u64::MAX, 0xffff_ffff, 0x1_0000_0000];
        for row in table() {
            match row.when {
                When::Always => {}
                When::AnyBit { mask, .. } => values.extend([mask, mask & mask.wrapping_neg()]),
                When::Equals { value, .. } | When::AtLeast { value, .. } => {
                    values.extend([value, value.wrapping_sub(1), value + 1])
                }
                When::NoneOf { values: listed, .. } => values.extend(listed),
            }
        }
        values.sort_unstable();
        values.dedup();
        values
    }

    #[test]
    fn the_search_answers_every_call_as_the_rows_in_turn_do() {
        let searched = decoded(&program().unwrap());
        let linear = linear_program();
        assert_the_kernel_would_take(&searched);
        let native = native_arch().unwrap();
        let foreign = 0x4000_0003; // AUDIT_ARCH_I386
        let mut numbers: Vec<u32> = (0..FIRST_UNREVIEWED_SYSCALL + 40).collect();
        numbers.extend([0x4000_0000, 0x4000_0001 + 55, u32::MAX]);
        let values = argument_values();
        let mut calls = 0;
        for arch in [native, foreign] {
            for &number in &numbers {
                for index in 0..values.len() {
                    // Each argument a different value, so that a rule on
                    // any one of them is met and missed.
                    let mut data = [0u32; 16];
                    data[0] = number;
                    data[1] = arch;
                    for arg in 0..6 {
                        let value = values[(index + arg * 7) % values.len()];
                        data[4 + arg * 2] = value as u32;
                        data[5 + arg * 2] = (value >> 32) as u32;
                    }
                    let verdict = answer(&searched, &data).0;
                    if arch == foreign {
                        assert_eq!(verdict, RET_KILL_PROCESS, "a foreign call, {number}");
                    }
                    assert_eq!(
                        verdict,
                        answer(&linear, &data).0,
                        "syscall {number} of arch {arch:#x} with arguments {:?}",
                        &data[4..]
                    );
                    calls += 1;
                }
            }
        }
        assert!(calls > 30_000, "{calls} calls compared");
    }

    #[test]
    fn a_search_too_wide_for_a_branch_jumps_past_it_instead() {
        // Every even number named: a search of 468 runs, whose first
        // branch lies far more than 255 instructions away.
        let named: BTreeSet<u32> = (0..FIRST_UNREVIEWED_SYSCALL).step_by(2).collect();
        let mut program = range_guard(&named, 1).unwrap();
        let the_tables = (RETURN, 0, 0, 0x0005_0063);
        let at_once = (RETURN, 0, 0, RET_ALLOW | 1);
        program.extend([the_tables, at_once]);
        assert!(program.len() > 600, "{} instructions", program.len());
        assert_the_kernel_would_take(&program);
        let native = native_arch().unwrap();
        for number in 0..FIRST_UNREVIEWED_SYSCALL {
            let mut data = [0u32; 16];
            data[0] = number;
            data[1] = native;
            // The guard ends with the allow the chain turns into a jump to
            // the table's programs.
            let expected = if named.contains(&number) {
                RET_ALLOW
            } else {
                at_once.3
            };
            assert_eq!(answer(&program, &data).0, expected, "syscall {number}");
        }
        let mut foreign = [0u32; 16];
        foreign[1] = 0x4000_0003;
        assert_eq!(
            answer(&program, &foreign).0,
            RET_ALLOW,
            "a foreign call goes to the tables"
        );
    }

    /// The kernel's look at a new filter (which calls it may allow without
    /// running it) steps through it once per syscall number: a call the
    /// table does not name is allowed after a few comparisons, not after a
    /// comparison with every row.
    #[test]
    fn a_call_no_row_names_is_allowed_after_a_short_search() {
        let program = decoded(&program().unwrap());
        let native = native_arch().unwrap();
        let refused: BTreeSet<u32> = table().map(|row| row.number as u32).collect();
        let mut longest = 0;
        for number in (0..FIRST_UNREVIEWED_SYSCALL).filter(|n| !refused.contains(n)) {
            let mut data = [0u32; 16];
            data[0] = number;
            data[1] = native;
            let (verdict, steps) = answer(&program, &data);
            assert_eq!(verdict, RET_ALLOW, "syscall {number}");
            longest = longest.max(steps);
        }
        assert!(longest <= 20, "an unnamed call took {longest} instructions");
        let linear = linear_program();
        let mut data = [0u32; 16];
        data[1] = native;
        data[0] = (0..FIRST_UNREVIEWED_SYSCALL)
            .rev()
            .find(|n| !refused.contains(n))
            .unwrap();
        assert!(
            answer(&linear, &data).1 > 200,
            "the linear program is not the slow one it was"
        );
    }

    #[test]
    fn a_chain_refuses_a_return_it_cannot_read() {
        let return_accumulator = (0x16, 0, 0, 0); // BPF_RET | BPF_A
        assert!(matches!(
            chain(vec![
                vec![return_accumulator],
                vec![(RETURN, 0, 0, RET_ALLOW)]
            ]),
            Err(SeccompError::Chain(_))
        ));
    }
}
