//! The transform world's capabilities: the declared inputs, read-only, and a
//! sink that accepts exactly the declared outputs, each once.

use std::collections::BTreeMap;

use bl_core::sha256_hex;

use crate::bindings::artifacts::{
    ArtifactError, InputInfo, OutputDecl, Visibility as WitVisibility,
};

/// Who may consume an output (seed 002's visibility).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Visibility {
    /// Any declared consumer bound to it.
    Consumer,
    /// Operators and deterministic transforms only, never an agent.
    SystemOnly,
}

/// One input handed to a transform, already verified by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputArtifact {
    pub name: String,
    pub media_type: String,
    pub bytes: Vec<u8>,
}

impl InputArtifact {
    pub fn digest(&self) -> String {
        bl_core::Sha256Digest::of(&self.bytes).to_string()
    }
}

/// One output a transform must publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputDeclaration {
    pub name: String,
    pub media_type: String,
    pub visibility: Visibility,
}

/// One output a transform published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedOutput {
    pub name: String,
    pub media_type: String,
    pub visibility: Visibility,
    pub digest: String,
    pub bytes: Vec<u8>,
}

pub struct InputSet {
    inputs: Vec<(InputInfo, Vec<u8>)>,
}

impl InputSet {
    pub(crate) fn new(inputs: Vec<InputArtifact>) -> Self {
        InputSet {
            inputs: inputs
                .into_iter()
                .map(|input| {
                    let info = InputInfo {
                        digest: input.digest(),
                        name: input.name,
                        media_type: input.media_type,
                        size: input.bytes.len() as u64,
                    };
                    (info, input.bytes)
                })
                .collect(),
        }
    }

    pub(crate) fn list(&self) -> Vec<InputInfo> {
        self.inputs.iter().map(|(info, _)| info.clone()).collect()
    }

    pub(crate) fn read(&self, name: &str) -> Result<Vec<u8>, ArtifactError> {
        self.inputs
            .iter()
            .find(|(info, _)| info.name == name)
            .map(|(_, bytes)| bytes.clone())
            .ok_or_else(|| ArtifactError::NotDeclared(format!("no input named `{name}`")))
    }
}

pub struct OutputSink {
    declared: Vec<OutputDeclaration>,
    written: BTreeMap<String, Vec<u8>>,
    total_bytes: usize,
    limit_bytes: usize,
}

impl OutputSink {
    pub(crate) fn new(declared: Vec<OutputDeclaration>, limit_bytes: usize) -> Self {
        OutputSink {
            declared,
            written: BTreeMap::new(),
            total_bytes: 0,
            limit_bytes,
        }
    }

    pub(crate) fn limit_bytes(&self) -> usize {
        self.limit_bytes
    }

    pub(crate) fn declared(&self) -> Vec<OutputDecl> {
        self.declared
            .iter()
            .map(|d| OutputDecl {
                name: d.name.clone(),
                media_type: d.media_type.clone(),
                visibility: match d.visibility {
                    Visibility::Consumer => WitVisibility::Consumer,
                    Visibility::SystemOnly => WitVisibility::SystemOnly,
                },
            })
            .collect()
    }

    pub(crate) fn write(&mut self, name: String, bytes: Vec<u8>) -> Result<(), ArtifactError> {
        if !self.declared.iter().any(|d| d.name == name) {
            return Err(ArtifactError::NotDeclared(format!(
                "`{name}` is not a declared output"
            )));
        }
        if self.written.contains_key(&name) {
            return Err(ArtifactError::AlreadyWritten(name));
        }
        if self.total_bytes + bytes.len() > self.limit_bytes {
            return Err(ArtifactError::TooLarge(format!(
                "`{name}` would take the outputs past the limit of {} bytes",
                self.limit_bytes
            )));
        }
        self.total_bytes += bytes.len();
        self.written.insert(name, bytes);
        Ok(())
    }

    /// The published outputs in declaration order, or the first declared
    /// output that was never written.
    pub(crate) fn finish(mut self) -> Result<Vec<PublishedOutput>, Unwritten> {
        let mut out = Vec::new();
        for decl in self.declared {
            let bytes = self
                .written
                .remove(&decl.name)
                .ok_or_else(|| Unwritten(decl.name.clone()))?;
            out.push(PublishedOutput {
                digest: bl_core::Sha256Digest::of(&bytes).to_string(),
                name: decl.name,
                media_type: decl.media_type,
                visibility: decl.visibility,
                bytes,
            });
        }
        Ok(out)
    }
}

/// A declared output the transform never wrote (its name).
#[derive(Debug)]
pub(crate) struct Unwritten(pub(crate) String);

/// The seed a transform is handed: derived from the run id and the input
/// digests only, so a re-run of the same inputs gets the same seed and the
/// same outputs.
pub fn transform_seed(run_id: &str, inputs: &[InputArtifact]) -> Vec<u8> {
    let mut digests: Vec<String> = inputs.iter().map(InputArtifact::digest).collect();
    digests.sort();
    let material = format!("bl-transform-seed/v1\n{run_id}\n{}", digests.join("\n"));
    hex::decode(sha256_hex(material.as_bytes())).expect("sha256_hex is hex")
}
