//! `bl keys …`: the Ed25519 keys that sign checkpoints.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use bl_store::SigningKey;
use clap::Subcommand;

use crate::exit::{CliError, CliResult, Exit};

#[derive(Subcommand)]
#[command(defer = true)]
pub enum KeysCommand {
    /// Make an Ed25519 signing key (mode 0600) and print its verifier key.
    Generate {
        /// The key's name, written into every signature.
        #[arg(long, default_value = "bl")]
        name: String,
        /// Where the private key goes (default: ~/.config/bl/keys/NAME.key).
        /// Refused inside a run directory. NAME.pub goes beside it.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Print the verifier (public) key of a private key file.
    Public {
        /// The private key file.
        key: PathBuf,
    },
}

fn default_key_path(name: &str) -> Result<PathBuf, String> {
    let dir = bl_app::paths::keys_dir().ok_or("no HOME: pass --out")?;
    Ok(dir.join(format!("{name}.key")))
}

/// The files only a run directory holds (a graph run's, or a loop run's
/// ledger).
const RUN_RECORDS: [&str; 6] = [
    bl_store::RunDir::RECORDS[0],
    bl_store::RunDir::RECORDS[1],
    bl_store::RunDir::RECORDS[2],
    bl_store::RunDir::RECORDS[3],
    bl_store::RunDir::RECORDS[4],
    bl_store::LoopRunDir::LEDGER,
];

/// A directory that holds a run's records, or lies inside one.
fn inside_run_dir(path: &Path) -> Option<PathBuf> {
    let absolute = std::path::absolute(path).ok()?;
    absolute
        .ancestors()
        .skip(1)
        .find(|dir| RUN_RECORDS.iter().any(|record| dir.join(record).is_file()))
        .map(Path::to_path_buf)
}

pub fn run(cmd: KeysCommand) -> CliResult {
    let result = match cmd {
        KeysCommand::Generate { name, out } => generate(&name, out),
        KeysCommand::Public { key } => bl_app::keys::read_signing_key(&key)
            .map_err(|e| e.to_string())
            .map(|k| {
                let text = k.verifier().to_text();
                crate::output::answer(
                    || serde_json::json!({"verifier_key": text}),
                    || text.clone(),
                )
            }),
    };
    match result {
        Ok(()) => Ok(Exit::Success),
        Err(e) => Err(CliError::refused(format!("keys: {e}"))),
    }
}

fn generate(name: &str, out: Option<PathBuf>) -> Result<(), String> {
    let path = match out {
        Some(p) => p,
        None => default_key_path(name)?,
    };
    if let Some(run) = inside_run_dir(&path) {
        return Err(format!(
            "{} is inside the run directory {}; keep keys out of run directories, where they would travel with the evidence they sign",
            path.display(),
            run.display()
        ));
    }
    let key = SigningKey::generate(name).map_err(|e| e.to_string())?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| {
            format!(
                "{}: {e} (an existing key is never overwritten)",
                path.display()
            )
        })?;
    file.write_all(format!("{}\n", key.to_text()).as_bytes())
        .and_then(|_| file.sync_all())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let public = key.verifier().to_text();
    let pub_path = path.with_extension("pub");
    std::fs::write(&pub_path, format!("{public}\n"))
        .map_err(|e| format!("{}: {e}", pub_path.display()))?;
    crate::output::answer(
        || {
            serde_json::json!({
                "private_key": path, "verifier_key_file": pub_path, "verifier_key": public,
            })
        },
        || {
            format!(
                "private key: {} (mode 0600)\nverifier key: {} \n{public}",
                path.display(),
                pub_path.display()
            )
        },
    );
    Ok(())
}
