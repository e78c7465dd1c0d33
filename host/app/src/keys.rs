//! Reading keys: the private key that signs checkpoints and approvals,
//! and the verifier key that checks them.

use std::path::Path;

use bl_store::{SigningKey, VerifierKey};

use crate::error::AppError;

/// Reads a private key file, refusing one others may read and a public
/// (verifier) key given in its place.
pub fn read_signing_key(path: &Path) -> Result<SigningKey, AppError> {
    use std::os::unix::fs::PermissionsExt;
    let refused = |why: String| AppError::Refused(why);
    let meta = std::fs::metadata(path).map_err(|e| refused(format!("{}: {e}", path.display())))?;
    // A verifier key is public: say what it is rather than how to hide it.
    if let Ok(text) = std::fs::read_to_string(path)
        && VerifierKey::parse(&text).is_ok()
    {
        return Err(refused(format!(
            "{} holds a verifier (public) key; give the private key beside it (NAME.key)",
            path.display()
        )));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(refused(format!(
            "{}: a private key must not be readable by others; chmod 600 it",
            path.display()
        )));
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| refused(format!("{}: {e}", path.display())))?;
    SigningKey::parse(&text).map_err(|e| refused(format!("{}: {e}", path.display())))
}

/// A verifier key given as text or as a file holding it. An argument that
/// is neither is reported as a missing file first: most often it is a
/// mistyped path.
pub fn read_verifier_key(arg: &str) -> Result<VerifierKey, AppError> {
    read_verifier_key_for("--pubkey", arg)
}

/// [`read_verifier_key`], its errors naming `option`, the flag it came
/// from (`--reviewer`, `--for`).
pub fn read_verifier_key_for(option: &str, arg: &str) -> Result<VerifierKey, AppError> {
    if Path::new(arg).is_file() {
        let text = std::fs::read_to_string(arg)
            .map_err(|e| AppError::refused(format!("{option} {arg}: {e}")))?;
        return VerifierKey::parse(&text).map_err(|e| {
            // A private key where its public half belongs: say so.
            if SigningKey::parse(&text).is_ok() {
                AppError::refused(format!(
                    "{option} {arg} holds a private key; give its public half (NAME.pub, or `bl keys public {arg}`)"
                ))
            } else {
                AppError::refused(format!("{option} {arg}: not a verifier key (name+id+key): {e}"))
            }
        });
    }
    VerifierKey::parse(arg).map_err(|e| {
        AppError::refused(format!(
            "{option} {arg}: no such file, and not a verifier key (name+id+key) either: {e}"
        ))
    })
}
