//! [`Sandbox`]: runs a command in one isolation tier, behind the
//! [`bl_core::CommandRunner`] port.

use std::path::{Path, PathBuf};

use bl_core::{CommandError, CommandResult, CommandRunner, CommandSpec};

use crate::bubblewrap::{self, Cage, Shown};
use crate::caged_user::{CagedUser, Lend, Staging, running_as_root};
use crate::containment::Contained;
use crate::root_cage::{CageView, RootCage};
use crate::subprocess::{PrivateDirs, scrubbed_env};
use crate::{Tier, seccomp};

/// Runs commands in one isolation tier.
#[derive(Debug, Clone)]
pub struct Sandbox {
    tier: Tier,
    bwrap: Option<PathBuf>,
    egress: Option<EgressBridge>,
    user: CagedUser,
    /// An empty directory, made on first use and shared by every command
    /// this runner (and its clones) cages: each cage mounts its own private
    /// tmpfs over it, inside its own mount namespace, so nothing is ever
    /// written there and one directory serves them all.
    mount_point: std::sync::Arc<std::sync::OnceLock<tempfile::TempDir>>,
    /// The staging directory when bl runs as root (see [`Staging::prepare`]).
    staging_root: std::sync::Arc<std::sync::OnceLock<tempfile::TempDir>>,
    /// Directories the process tier hides behind an empty tmpfs (a graph
    /// run's directory: the other nodes' files and the published outputs),
    /// the workspace bound back inside them.
    hidden: Vec<PathBuf>,
    /// Whether the first command's containment and network namespace are
    /// made ahead as soon as the runner is, or only once
    /// [`CommandRunner::expect_commands`] says commands will run.
    ahead: Ahead,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ahead {
    AtOnce,
    OnDemand,
}

/// The allowlist posture's way out of a caged network: the host's CONNECT
/// proxy socket, bind-mounted into the sandbox, and the `bl` binary that
/// bridges a loopback port inside the sandbox to it (`bl sandbox bridge`).
#[derive(Debug, Clone)]
pub struct EgressBridge {
    pub proxy_socket: PathBuf,
    pub bridge_binary: PathBuf,
}

/// Where bubblewrap is found, on the usual paths.
pub fn find_bwrap() -> Option<PathBuf> {
    ["/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

impl Sandbox {
    /// A runner for `tier`, finding bwrap on the usual paths for the tiers
    /// that need it. Run by root, caged commands run as nobody (65534).
    pub fn new(tier: Tier) -> Self {
        Sandbox::with_bwrap(tier, find_bwrap())
    }

    /// A runner that uses the bwrap at `bwrap` (`None`: this machine has none).
    pub fn with_bwrap(tier: Tier, bwrap: Option<PathBuf>) -> Self {
        prepare_ahead(tier, CagedUser::NOBODY);
        Sandbox::unprepared(tier, bwrap, Ahead::AtOnce)
    }

    /// As [`Sandbox::new`], but what the first command waits for (the
    /// containment and its watchdog process, a network namespace) is made
    /// only once [`CommandRunner::expect_commands`] is called, or else by
    /// the first command itself: for a user that may run no command at
    /// all, such as a loop with a cassette worker and a wasm-only gate.
    pub fn on_demand(tier: Tier) -> Self {
        Sandbox::unprepared(tier, find_bwrap(), Ahead::OnDemand)
    }

    fn unprepared(tier: Tier, bwrap: Option<PathBuf>, ahead: Ahead) -> Self {
        Sandbox {
            tier,
            bwrap: bwrap.filter(|p| p.is_file()),
            egress: None,
            user: CagedUser::NOBODY,
            mount_point: Default::default(),
            staging_root: Default::default(),
            hidden: Vec::new(),
            ahead,
        }
    }

    /// The same runner, with `dirs` hidden from process_restricted commands
    /// (each behind an empty tmpfs; the workspace stays visible). The
    /// container tier shows nothing of the host's but the system
    /// directories anyway.
    pub fn hiding(mut self, dirs: Vec<PathBuf>) -> Self {
        self.hidden = dirs
            .into_iter()
            .map(|d| std::path::absolute(&d).unwrap_or(d))
            .collect();
        self
    }

    /// The same runner, with the sandbox's only network being `bridge`'s
    /// proxy (bridged into a caged tier's own network namespace; the
    /// unconfined tier cannot carry it).
    pub fn with_egress(mut self, bridge: EgressBridge) -> Self {
        self.egress = Some(bridge);
        // The staging directory holds the bridge's mount points: a fresh one.
        self.staging_root = Default::default();
        self
    }

    /// The same runner, with caged commands running as `user` when bl runs
    /// as root.
    pub fn with_caged_user(mut self, user: CagedUser) -> Self {
        if user != self.user && self.ahead == Ahead::AtOnce {
            prepare_ahead(self.tier, user);
        }
        self.user = user;
        self
    }

    pub fn tier(&self) -> Tier {
        self.tier
    }

    /// Who a caged command runs as on the host: `None` when bl is not root
    /// (the command is then bl's own user, mapped by bwrap).
    pub fn caged_user(&self) -> Option<CagedUser> {
        running_as_root().then_some(self.user)
    }

    /// The host uid and gid a command in this runner runs as.
    pub fn host_ids(&self) -> (u32, u32) {
        match self.caged_user() {
            Some(user) if self.tier.is_caged() => (user.uid, user.gid),
            _ => (
                nix::unistd::getuid().as_raw(),
                nix::unistd::getgid().as_raw(),
            ),
        }
    }

    /// The directory a cage's private HOME and TMPDIR are mounted on.
    fn mount_point(&self) -> Result<&Path, CommandError> {
        if let Some(dir) = self.mount_point.get() {
            return Ok(dir.path());
        }
        let dir = crate::containment::owned_mount_point_dir("bl-cmd-")
            .map_err(|e| CommandError::Spawn(format!("cannot make a private HOME: {e}")))?;
        // A thread that loses the race drops (removes) the directory it made.
        Ok(self.mount_point.get_or_init(|| dir).path())
    }

    fn bwrap(&self) -> Result<&Path, CommandError> {
        self.bwrap.as_deref().ok_or_else(|| {
            CommandError::Denied(format!(
                "the {} tier needs bubblewrap, which is not installed: install the `bubblewrap` package \
                 (or run `scripts/dev setup`), or choose the workspace_only tier",
                self.tier.name()
            ))
        })
    }

    /// Runs `spec` (whose program was found at `program`) in its cage.
    fn run_caged(&self, spec: &CommandSpec, program: &Path) -> Result<CommandResult, CommandError> {
        // Declared first, dropped last: after the staging and private dirs.
        let _running = bl_core::interrupt::Running::start();
        let bwrap = self.bwrap()?;
        let workspace = spec.workspace.canonicalize().map_err(|e| {
            CommandError::Denied(format!("workspace {}: {e}", spec.workspace.display()))
        })?;
        let private = match &spec.private_dir {
            Some(_) => PrivateDirs::for_spec(spec)?,
            None => PrivateDirs::mount_point(self.mount_point()?),
        };
        let view = self.view(spec, &workspace)?;
        let staging = match self.caged_user() {
            Some(user) => Some(Staging::prepare(
                user,
                &workspace,
                spec.workspace_writable,
                self.egress.as_ref(),
                &view.lends,
                &self.staging_root,
            )?),
            None => None,
        };
        let egress = match (&staging, &self.egress) {
            (_, None) => None,
            (Some(s), Some(_)) => s.proxy_socket.as_deref().zip(s.bridge_binary.as_deref()),
            (None, Some(b)) => Some((b.proxy_socket.as_path(), b.bridge_binary.as_path())),
        };
        // What is shown again, from where bwrap can reach it: the staged
        // clone when bl runs as root, the host's path otherwise.
        let shown: Vec<Shown> = view
            .lends
            .iter()
            .zip(&view.inside)
            .enumerate()
            .map(|(i, (lend, inside))| Shown {
                source: staging
                    .as_ref()
                    .map_or_else(|| lend.host(), |s| s.lent[i].clone()),
                inside: inside.clone(),
                writable: lend.writable,
            })
            .collect();
        // Run by root, the process tier's cage is bl's own (see
        // root_cage): the child execs the command (or the egress bridge
        // that runs it) itself, in the workspace.
        let own = match &staging {
            Some(staging) if self.tier == Tier::ProcessRestricted => {
                let view = CageView {
                    workspace: &workspace,
                    workspace_source: &staging.workspace,
                    writable: spec.workspace_writable,
                    private_root: private.root(),
                    covered: &view.covered,
                    shown: &shown,
                    hidden: &self.hidden,
                    links: &view.links,
                };
                let user = staging.user;
                Some(RootCage::new(
                    &view,
                    user.uid,
                    user.gid,
                    seccomp_program()?,
                )?)
            }
            _ => None,
        };
        let filter;
        let mut keep_fds = Vec::new();
        let (launched, args, cwd) = if own.is_some() {
            let mut args = Vec::new();
            let launched = match egress {
                Some((socket, binary)) => {
                    args.extend(bubblewrap::bridge_args(&socket.display().to_string()));
                    args.extend(spec.argv.iter().cloned());
                    binary.to_path_buf()
                }
                None => {
                    args.extend(spec.argv.iter().skip(1).cloned());
                    program.to_path_buf()
                }
            };
            (launched, args, workspace.as_path())
        } else {
            let cage = Cage {
                tier: self.tier,
                workspace: &workspace,
                workspace_source: staging.as_ref().map_or(&workspace, |s| &s.workspace),
                writable: spec.workspace_writable,
                private_root: private.root(),
                egress,
                hidden: &self.hidden,
                covered: &view.covered,
                shown: &shown,
                links: &view.links,
            };
            let cage_args = bubblewrap::args(&cage)?;
            // The filter file stays open until the command ends: bwrap
            // reads it through `--add-seccomp-fd FD`.
            filter = seccomp_filter_file()?;
            keep_fds.push(std::os::fd::AsRawFd::as_raw_fd(&filter));
            let mut args = vec!["--add-seccomp-fd".to_string(), keep_fds[0].to_string()];
            args.extend(cage_args);
            args.extend(spec.argv.iter().cloned());
            // Dropped to the caged user, bwrap may not be able to enter the
            // workspace's parents; it starts from the staging directory.
            let cwd = staging.as_ref().map_or(workspace.as_path(), Staging::dir);
            (bwrap.to_path_buf(), args, cwd)
        };
        // Without an egress bridge the cage has no network at all: npm is
        // told so, and fails at once instead of retrying a network that is
        // not there for a minute per request. A grant may say otherwise.
        let mut granted = Vec::with_capacity(spec.env.len() + 1);
        if self.egress.is_none() {
            granted.push(("npm_config_offline".to_string(), "true".to_string()));
        }
        granted.extend(spec.env.iter().cloned());
        let mut contained = Contained::new();
        granted.extend(
            contained
                .marker()
                .map(|(k, v)| (k, v.to_string_lossy().into_owned())),
        );
        let env = scrubbed_env(&private.home, &private.tmp, &granted);
        let steps = staging.as_ref().map(|s| s.child_steps(own)).transpose()?;
        // Started without copying this process (see spawn), inside its
        // cgroup leaf where the kernel can; then streamed or supervised.
        let started = std::time::Instant::now();
        let launch = crate::spawn::Launch {
            program: &launched,
            args,
            env,
            cwd,
            keep_fds: &keep_fds,
            steps: steps.as_ref(),
            rlimits: true,
            cgroup_procs: contained.procs_fd(),
            cgroup_dir: contained.leaf_dir_fd(),
            exit_before_exec: false,
        };
        let result = crate::subprocess::run_launched(
            &launch,
            spec,
            &launched.display().to_string(),
            started,
            &mut contained,
        );
        // Whatever the command left running ends with it.
        contained.end();
        match staging {
            Some(staging) => {
                let given_back = staging.finish();
                let result = result?;
                given_back?;
                Ok(result)
            }
            None => result,
        }
    }
}

/// What a cage shows of the host beyond its tier's own view, and what it
/// covers so as to show only that.
struct View {
    /// Directories covered with an empty tmpfs (the process tier): the
    /// operator's home, and what the caged user could not pass through.
    covered: Vec<PathBuf>,
    /// Paths shown again inside: lent home paths, the program's directory.
    lends: Vec<Lend>,
    /// Where each lend appears inside.
    inside: Vec<PathBuf>,
    /// Symlinks made inside: (target, link).
    links: Vec<(PathBuf, PathBuf)>,
}

/// Whether `path` is `dir` or lies below it.
fn under(path: &Path, dir: &Path) -> bool {
    path.starts_with(dir)
}

impl Sandbox {
    /// What `spec`'s cage shows beyond its tier's view: the home paths it
    /// was granted (and nothing else of that home), and the program it
    /// runs when that lives where the cage would hide it (an agent CLI in
    /// `~/.local/bin`).
    fn view(&self, spec: &CommandSpec, workspace: &Path) -> Result<View, CommandError> {
        let container = self.tier == Tier::ContainerRestricted;
        let caged = self
            .caged_user()
            .map(|u| (u.uid, u.gid))
            .filter(|_| self.tier.is_caged());
        let mut covered: Vec<PathBuf> = Vec::new();
        let home = spec
            .home
            .as_ref()
            .and_then(|grant| Some((grant.dir.canonicalize().ok()?, grant)))
            .filter(|(dir, _)| dir.is_dir() && dir.parent().is_some());
        if let Some((dir, _)) = &home
            && !container
        {
            covered.push(dir.clone());
        }
        let program = Path::new(&spec.argv[0]);
        let canonical = if program.is_absolute() {
            program.canonicalize().ok()
        } else {
            None
        };
        if let Some((uid, gid)) = caged
            && !container
        {
            let mut reached: Vec<&Path> = vec![workspace];
            reached.extend(self.hidden.iter().map(PathBuf::as_path));
            reached.extend(canonical.as_deref());
            for path in reached {
                if let Some(blocked) = bubblewrap::first_unsearchable_ancestor(path, uid, gid) {
                    covered.push(blocked);
                }
            }
        }
        // Outermost first, each once: a tmpfs over a covered directory's
        // parent hides what lies below it anyway.
        covered.sort();
        covered.dedup();
        let nested: Vec<PathBuf> = covered
            .iter()
            .filter(|c| covered.iter().any(|o| o != *c && under(c, o)))
            .cloned()
            .collect();
        covered.retain(|c| !nested.contains(c));
        let hidden_inside = |path: &Path| {
            if container {
                !bubblewrap::SYSTEM_DIRS
                    .iter()
                    .any(|d| under(path, Path::new(d)))
            } else {
                covered.iter().any(|c| under(path, c)) || self.hidden.iter().any(|h| under(path, h))
            }
        };
        let mut lends = Vec::new();
        let mut inside = Vec::new();
        if let Some((dir, grant)) = &home {
            let writable = grant
                .paths
                .iter()
                .filter(|p| !grant.read_only.contains(p))
                .map(|p| (p, true));
            let pinned = grant.read_only.iter().map(|p| (p, false));
            // The read-only pins after what holds them: mounted on top.
            for (rel, writable) in writable.chain(pinned) {
                let lend = Lend {
                    base: dir.clone(),
                    rel: rel.clone(),
                    writable,
                };
                if std::fs::symlink_metadata(lend.host()).is_err() {
                    continue;
                }
                // Checked one name at a time (a symlink is refused); run
                // by root, the mount is then made from that very file.
                crate::caged_user::open_lend(&lend)?;
                inside.push(if container {
                    Path::new(bubblewrap::CONTAINER_HOME).join(rel)
                } else {
                    lend.host()
                });
                lends.push(lend);
            }
        }
        let mut links = Vec::new();
        if let Some(canonical) = canonical
            && let Some(dir) = canonical.parent()
            && hidden_inside(&canonical)
        {
            // Its directory when it is an install of its own (a link points
            // into it, as Claude Code's installer lays it out) holding none
            // of what the cage hides; otherwise the program file alone.
            let holds = |p: &Path| under(p, dir);
            let holds_hidden = holds(workspace)
                || self.hidden.iter().any(|h| holds(h))
                || covered.iter().any(|c| holds(c))
                || home.as_ref().is_some_and(|(h, _)| holds(h));
            let (base, rel) = if canonical != program && !holds_hidden {
                (dir.to_path_buf(), PathBuf::new())
            } else {
                (
                    dir.to_path_buf(),
                    PathBuf::from(canonical.file_name().unwrap_or_default()),
                )
            };
            let lend = Lend {
                base,
                rel,
                writable: false,
            };
            inside.push(lend.host());
            lends.push(lend);
            if canonical != program && program.parent().is_some_and(hidden_inside) {
                links.push((canonical.clone(), program.to_path_buf()));
            }
        }
        Ok(View {
            covered: if container { Vec::new() } else { covered },
            lends,
            inside,
            links,
        })
    }
}

impl CommandRunner for Sandbox {
    fn name(&self) -> &str {
        self.tier.name()
    }

    fn expect_commands(&self) {
        prepare_ahead(self.tier, self.user);
    }

    fn run(&self, spec: &CommandSpec) -> Result<CommandResult, CommandError> {
        if spec.argv.is_empty() {
            return Err(CommandError::Denied("the argv is empty".into()));
        }
        match self.tier {
            // An allowlist means nothing without a network namespace to
            // hold the command to it: refuse rather than run it loose.
            Tier::WorkspaceOnly if self.egress.is_some() => Err(CommandError::Denied(
                "an egress allowlist needs a caged tier (process_restricted or container_restricted); workspace_only has the host's network"
                    .into(),
            )),
            Tier::WorkspaceOnly => crate::Subprocess.run(spec),
            Tier::CustomerManagedWorker => Err(CommandError::Denied(
                "customer_managed_worker nodes run on the customer's own worker, never on this host; \
                 register that worker or choose another tier"
                    .into(),
            )),
            #[cfg(target_os = "macos")]
            Tier::ProcessRestricted | Tier::ContainerRestricted => {
                crate::seatbelt::run(self.tier, spec)
            }
            #[cfg(not(target_os = "macos"))]
            Tier::ProcessRestricted | Tier::ContainerRestricted => {
                // bwrap reports a program it cannot exec as the command's
                // own exit 1; say it did not start, as a subprocess would.
                let program =
                    crate::subprocess::find_program(&spec.argv[0], &spec.workspace, &spec.env)?;
                self.run_caged(spec, &program)
            }
        }
    }
}

/// Makes, on threads of bl's while the run gets ready, what the first
/// command would otherwise wait for: the containment (bl's cgroup and its
/// watchdog) and, for the cages bl makes itself as root, the idmapping and
/// a network namespace.
fn prepare_ahead(tier: Tier, user: CagedUser) {
    #[cfg(target_os = "linux")]
    {
        // Once per process and caged user: a graph makes a runner per node.
        static PREPARED: std::sync::Mutex<Vec<(bool, CagedUser)>> =
            std::sync::Mutex::new(Vec::new());
        let own_cage = tier == Tier::ProcessRestricted && running_as_root();
        if own_cage {
            crate::spare_net::make_ahead();
        }
        {
            let mut prepared = PREPARED.lock().unwrap_or_else(|e| e.into_inner());
            if prepared.contains(&(own_cage, user)) {
                return;
            }
            prepared.push((own_cage, user));
        }
        let _ = std::thread::Builder::new()
            .name("bl-ahead".into())
            .spawn(move || {
                if own_cage {
                    crate::caged_user::prepare_idmap(user);
                }
                crate::containment::prepare();
            });
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (tier, user);
}

/// The compiled filter (raw cBPF), compiled once per process.
fn seccomp_program() -> Result<&'static [u8], CommandError> {
    static PROGRAM: std::sync::OnceLock<Result<Vec<u8>, CommandError>> = std::sync::OnceLock::new();
    PROGRAM
        .get_or_init(|| seccomp::program().map_err(|e| CommandError::Denied(e.to_string())))
        .as_ref()
        .map(Vec::as_slice)
        .map_err(Clone::clone)
}

/// The compiled filter in an anonymous in-memory file, rewound: every
/// bubblewrap cage reads its own copy.
fn seccomp_filter_file() -> Result<std::fs::File, CommandError> {
    use std::io::{Seek, Write};
    let program = seccomp_program()?;
    let fail = |e: std::io::Error| CommandError::Spawn(format!("seccomp filter: {e}"));
    let fd = nix::sys::memfd::memfd_create(c"bl-seccomp", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
        .map_err(|e| fail(e.into()))?;
    let mut file = std::fs::File::from(fd);
    file.write_all(program)
        .and_then(|_| file.rewind())
        .map_err(fail)?;
    Ok(file)
}
