//! `quarantine_inputs`: seed entries whose names can carry credentials are
//! withheld from the workspace, and reported. The rule is bounded-loops'
//! list, matched on the entry's own name without regard to case.

const NAMES: &[&str] = &[
    ".env",
    ".env.local",
    ".envrc",
    ".npmrc",
    ".netrc",
    ".pgpass",
    ".pypirc",
    ".dockercfg",
    ".aws",
    ".docker",
    ".ssh",
    "credentials",
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
];
const SUFFIXES: &[&str] = &[
    ".pem",
    ".key",
    ".p12",
    ".pfx",
    ".asc",
    ".jks",
    ".keystore",
    ".kdbx",
    ".ppk",
];

/// Whether a file or directory called `name` is withheld.
pub fn withheld(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    NAMES.contains(&name.as_str()) || SUFFIXES.iter().any(|s| name.ends_with(s))
}

/// The warning bl prints for what it withheld.
pub fn warning(paths: &[String]) -> String {
    format!(
        "[bounded-loops] quarantine withheld {} seed entries from the sandbox: {}. These names can carry credentials. Set quarantine_inputs: false in bounds.yaml only if the loop genuinely needs one of them.",
        paths.len(),
        paths.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_names_are_withheld_and_look_alikes_kept() {
        for name in [
            ".env",
            ".ENV",
            ".npmrc",
            "id_rsa",
            "key.pem",
            "cert.P12",
            ".ssh",
            "credentials",
        ] {
            assert!(withheld(name), "{name}");
        }
        for name in [
            "id_rsa.pub",
            "credentials.json",
            "x.gpg",
            "x.crt",
            ".htpasswd",
            "secrets.json",
            "env",
            "main.py",
        ] {
            assert!(!withheld(name), "{name}");
        }
    }
}
