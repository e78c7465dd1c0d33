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

/// The right edge of a tree as leaves are appended: the heads of its
/// perfect subtrees, tallest first. A log that grows one line at a time
/// gets its tree head in O(log n) instead of rehashing every leaf.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frontier {
    size: u64,
    /// (height, head) of each perfect subtree, heights strictly falling.
    peaks: Vec<(u32, Hash)>,
}

impl Frontier {
    /// Appends one (leaf-hashed) leaf.
    pub fn push(&mut self, leaf: Hash) {
        let (mut height, mut node) = (0, leaf);
        while let Some(&(h, left)) = self.peaks.last() {
            if h != height {
                break;
            }
            self.peaks.pop();
            node = node_hash(&left, &node);
            height += 1;
        }
        self.peaks.push((height, node));
        self.size += 1;
    }

    /// How many leaves it holds.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The tree head, as `root` gives it over the same leaves: RFC 6962
    /// splits at the largest power of two below n, which is the tallest
    /// peak, so the head folds the peaks from the right.
    pub fn root(&self) -> Hash {
        let mut peaks = self.peaks.iter().rev();
        let Some(&(_, mut head)) = peaks.next() else {
            return Sha256::digest([]).into();
        };
        for (_, left) in peaks {
            head = node_hash(left, &head);
        }
        head
    }
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
    fn the_frontier_gives_the_same_head_as_the_whole_tree_at_every_size() {
        let all = leaves(70);
        let mut frontier = Frontier::default();
        assert_eq!(frontier.root(), root(&[]));
        for (n, leaf) in all.iter().enumerate() {
            frontier.push(*leaf);
            assert_eq!(frontier.size(), n as u64 + 1);
            assert_eq!(frontier.root(), root(&all[..=n]), "at size {}", n + 1);
        }
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

    fn hashes(hex_list: &[&str]) -> Vec<Hash> {
        hex_list
            .iter()
            .map(|h| hex::decode(h).unwrap().try_into().unwrap())
            .collect()
    }

    /// The published RFC 6962 vectors (Certificate Transparency's and
    /// transparency-dev's): eight leaves, every tree head from 1 to 8, and
    /// their audit and consistency paths.
    #[test]
    fn the_public_rfc_6962_test_vectors() {
        let data = [
            "",
            "00",
            "10",
            "2021",
            "3031",
            "40414243",
            "5051525354555657",
            "606162636465666768696a6b6c6d6e6f",
        ];
        let leaves: Vec<Hash> = data
            .iter()
            .map(|d| leaf_hash(&hex::decode(d).unwrap()))
            .collect();
        let roots = hashes(&[
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
            "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
            "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
            "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
            "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
        ]);
        for size in 1..=8 {
            assert_eq!(root(&leaves[..size]), roots[size - 1], "tree of {size}");
        }
        let inclusion: [(usize, usize, &[&str]); 4] = [
            (
                0,
                8,
                &[
                    "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                    "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                    "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
                ],
            ),
            (
                5,
                8,
                &[
                    "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                    "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
                ],
            ),
            (
                2,
                3,
                &["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"],
            ),
            (
                1,
                5,
                &[
                    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
                    "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                    "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                ],
            ),
        ];
        for (index, size, path) in inclusion {
            let path = hashes(path);
            assert_eq!(
                inclusion_proof(&leaves[..size], index).unwrap(),
                path,
                "leaf {index} of {size}"
            );
            assert!(verify_inclusion(
                &leaves[index],
                index,
                size,
                &path,
                &roots[size - 1]
            ));
        }
        let consistency: [(usize, usize, &[&str]); 4] = [
            (1, 1, &[]),
            (
                1,
                8,
                &[
                    "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                    "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                    "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
                ],
            ),
            (
                6,
                8,
                &[
                    "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
                    "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
                ],
            ),
            (
                2,
                5,
                &[
                    "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                    "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                ],
            ),
        ];
        for (old, new, path) in consistency {
            let path = hashes(path);
            assert_eq!(
                consistency_proof(&leaves[..new], old).unwrap(),
                path,
                "{old} → {new}"
            );
            assert!(verify_consistency(
                old,
                new,
                &path,
                &roots[old - 1],
                &roots[new - 1]
            ));
        }
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
