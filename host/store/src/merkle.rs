//! RFC 6962 (Certificate Transparency) Merkle trees over a run's events:
//! tree heads, inclusion proofs for one event and consistency proofs
//! between two tree sizes. Pure functions over leaf hashes; no I/O.
//!
//! A leaf is one event line's bytes without its newline.

use sha2::{Digest, Sha256};

pub type Hash = [u8; 32];

/// `SHA-256(0x00 || leaf)`.
pub fn leaf_hash(leaf: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(leaf);
    h.finalize().into()
}

/// `SHA-256(0x01 || left || right)`.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// The largest power of two strictly less than `n` (`n >= 2`).
fn split(n: usize) -> usize {
    debug_assert!(n >= 2);
    1 << (usize::BITS - 1 - (n - 1).leading_zeros())
}

/// The Merkle tree head over `leaves` (already leaf-hashed); the empty tree's
/// head is `SHA-256("")`.
pub fn root(leaves: &[Hash]) -> Hash {
    match leaves.len() {
        0 => Sha256::digest([]).into(),
        1 => leaves[0],
        n => {
            let k = split(n);
            node_hash(&root(&leaves[..k]), &root(&leaves[k..]))
        }
    }
}

/// The audit path for leaf `index` in the tree over `leaves` (RFC 6962 §2.1.1).
pub fn inclusion_proof(leaves: &[Hash], index: usize) -> Option<Vec<Hash>> {
    if index >= leaves.len() {
        return None;
    }
    fn path(index: usize, leaves: &[Hash], out: &mut Vec<Hash>) {
        let n = leaves.len();
        if n <= 1 {
            return;
        }
        let k = split(n);
        if index < k {
            path(index, &leaves[..k], out);
            out.push(root(&leaves[k..]));
        } else {
            path(index - k, &leaves[k..], out);
            out.push(root(&leaves[..k]));
        }
    }
    let mut out = Vec::new();
    path(index, leaves, &mut out);
    Some(out)
}

/// Checks an audit path (RFC 9162 §2.1.3.2).
pub fn verify_inclusion(
    leaf: &Hash,
    index: usize,
    size: usize,
    proof: &[Hash],
    root_hash: &Hash,
) -> bool {
    if index >= size {
        return false;
    }
    let (mut fn_, mut sn) = (index, size - 1);
    let mut r = *leaf;
    for p in proof {
        if sn == 0 {
            return false;
        }
        if fn_ & 1 == 1 || fn_ == sn {
            r = node_hash(p, &r);
            while fn_ & 1 == 0 && fn_ != 0 {
                fn_ >>= 1;
                sn >>= 1;
            }
        } else {
            r = node_hash(&r, p);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    sn == 0 && r == *root_hash
}

/// The consistency proof between the trees of the first `old_size` leaves and
/// of all `leaves` (RFC 6962 §2.1.2).
pub fn consistency_proof(leaves: &[Hash], old_size: usize) -> Option<Vec<Hash>> {
    if old_size == 0 || old_size > leaves.len() {
        return None;
    }
    fn subproof(m: usize, leaves: &[Hash], complete: bool, out: &mut Vec<Hash>) {
        let n = leaves.len();
        if m == n {
            if !complete {
                out.push(root(leaves));
            }
            return;
        }
        let k = split(n);
        if m <= k {
            subproof(m, &leaves[..k], complete, out);
            out.push(root(&leaves[k..]));
        } else {
            subproof(m - k, &leaves[k..], false, out);
            out.push(root(&leaves[..k]));
        }
    }
    let mut out = Vec::new();
    subproof(old_size, leaves, true, &mut out);
    Some(out)
}

/// Checks a consistency proof (RFC 9162 §2.1.4.2).
pub fn verify_consistency(
    old_size: usize,
    new_size: usize,
    proof: &[Hash],
    old_root: &Hash,
    new_root: &Hash,
) -> bool {
    if old_size == 0 || old_size > new_size {
        return false;
    }
    if old_size == new_size {
        return proof.is_empty() && old_root == new_root;
    }
    let mut proof: Vec<Hash> = proof.to_vec();
    if old_size.is_power_of_two() {
        proof.insert(0, *old_root);
    }
    let Some((first, rest)) = proof.split_first() else {
        return false;
    };
    let (mut fn_, mut sn) = (old_size - 1, new_size - 1);
    while fn_ & 1 == 1 {
        fn_ >>= 1;
        sn >>= 1;
    }
    let (mut fr, mut sr) = (*first, *first);
    for c in rest {
        if sn == 0 {
            return false;
        }
        if fn_ & 1 == 1 || fn_ == sn {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            while fn_ & 1 == 0 && fn_ != 0 {
                fn_ >>= 1;
                sn >>= 1;
            }
        } else {
            sr = node_hash(&sr, c);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    sn == 0 && fr == *old_root && sr == *new_root
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaves(n: usize) -> Vec<Hash> {
        (0..n)
            .map(|i| leaf_hash(format!("event {i}").as_bytes()))
            .collect()
    }

    #[test]
    fn known_answers_from_rfc_6962_style_vectors() {
        // The empty tree and a one-leaf tree over the empty string.
        assert_eq!(
            hex::encode(root(&[])),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            hex::encode(root(&[leaf_hash(b"")])),
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
        );
    }

    #[test]
    fn every_inclusion_proof_verifies_and_a_wrong_one_does_not() {
        for n in 1..=33 {
            let l = leaves(n);
            let r = root(&l);
            for i in 0..n {
                let proof = inclusion_proof(&l, i).unwrap();
                assert!(verify_inclusion(&l[i], i, n, &proof, &r), "n={n} i={i}");
                let other = leaf_hash(b"forged");
                assert!(!verify_inclusion(&other, i, n, &proof, &r));
                if n > 1 {
                    assert!(
                        !verify_inclusion(&l[i], (i + 1) % n, n, &proof, &r)
                            || l[i] == l[(i + 1) % n]
                    );
                }
            }
        }
    }

    #[test]
    fn every_consistency_proof_verifies_and_a_rewritten_history_does_not() {
        for n in 1..=33 {
            let l = leaves(n);
            let new_root = root(&l);
            for m in 1..=n {
                let proof = consistency_proof(&l, m).unwrap();
                let old_root = root(&l[..m]);
                assert!(
                    verify_consistency(m, n, &proof, &old_root, &new_root),
                    "m={m} n={n}"
                );
                let mut forked = l[..m].to_vec();
                forked[m - 1] = leaf_hash(b"rewritten");
                assert!(
                    !verify_consistency(m, n, &proof, &root(&forked), &new_root),
                    "m={m} n={n}"
                );
            }
        }
    }
}
