//! The nearest known word to one that was mistyped, for a message's "did
//! you mean" (a field, a node kind, a plugin's name).

/// The word of `known` nearest to `word`, when it is near enough to be the
/// one meant: at most a third of the longer word's letters apart (one at
/// least), counting a swap of two neighbours as one.
pub fn closest<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    known
        .into_iter()
        .map(|k| (strsim::damerau_levenshtein(word, k), k))
        .filter(|(distance, k)| *distance <= (k.len().max(word.len()) / 3).max(1))
        .min()
        .map(|(_, k)| k)
}
