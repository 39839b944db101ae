//! Secret values never reach the stored log: a task that prints one of its `secret_env`
//! values (on purpose or in a stack trace) has it replaced by `***` before its output is
//! spooled, so it is neither shipped nor shown. Output arrives in chunks, and a secret may
//! be split across two: the end of each chunk that could still begin one is held back
//! until the next arrives (or the stream ends).
//!
//! Values shorter than [`SHORTEST_MASKED`] bytes are not masked: they would blank out
//! ordinary output, and are no secret worth the name.

use aho_corasick::{AhoCorasick, MatchKind};

pub(crate) const SHORTEST_MASKED: usize = 4;
const MASK: &[u8] = b"***";

pub(crate) struct Masker {
    /// `None` when there is nothing to mask: output passes straight through.
    finder: Option<AhoCorasick>,
    longest: usize,
    held: Vec<u8>,
}

impl Masker {
    pub(crate) fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Masker {
        let patterns: Vec<&str> = secrets
            .into_iter()
            .filter(|s| s.len() >= SHORTEST_MASKED)
            .collect();
        let longest = patterns.iter().map(|p| p.len()).max().unwrap_or(0);
        let finder = (!patterns.is_empty())
            .then(|| {
                AhoCorasick::builder()
                    .match_kind(MatchKind::LeftmostLongest)
                    .build(&patterns)
                    .ok()
            })
            .flatten();
        Masker {
            finder,
            longest,
            held: Vec::new(),
        }
    }

    /// The next chunk of output, masked, minus what is held back.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let Some(finder) = &self.finder else {
            return chunk.to_vec();
        };
        self.held.extend_from_slice(chunk);
        // Bytes from `safe` on could be the start of a secret the next chunk completes.
        let mut safe = self.held.len().saturating_sub(self.longest - 1);
        let mut out = Vec::with_capacity(self.held.len());
        let mut from = 0;
        for found in finder.find_iter(&self.held) {
            if found.start() >= safe {
                break;
            }
            out.extend_from_slice(&self.held[from..found.start()]);
            out.extend_from_slice(MASK);
            from = found.end();
            safe = safe.max(found.end());
        }
        out.extend_from_slice(&self.held[from..safe.max(from)]);
        self.held.drain(..safe.max(from));
        out
    }

    /// The end of the stream: what was held back, masked.
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        let held = std::mem::take(&mut self.held);
        match &self.finder {
            Some(finder) => finder.replace_all_bytes(&held, &vec![MASK; finder.patterns_len()]),
            None => held,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn masked(secrets: &[&str], chunks: &[&[u8]]) -> Vec<u8> {
        let mut masker = Masker::new(secrets.iter().copied());
        let mut out = Vec::new();
        for chunk in chunks {
            out.extend(masker.push(chunk));
        }
        out.extend(masker.finish());
        out
    }

    #[test]
    fn a_secret_is_masked_whole_or_split_across_chunks() {
        let secret = "hunter2-secret";
        assert_eq!(
            masked(&[secret], &[b"token=hunter2-secret\n"]),
            b"token=***\n"
        );
        assert_eq!(
            masked(
                &[secret],
                &[b"token=hun", b"ter2-sec", b"ret and again hunter2-secret"]
            ),
            b"token=*** and again ***"
        );
        assert_eq!(masked(&["abc"], &[b"abc"]), b"abc", "too short to mask");
        assert_eq!(masked(&[], &[b"plain"]), b"plain");
    }

    proptest! {
        /// However the output is cut into chunks, no secret survives and nothing else
        /// changes.
        #[test]
        fn no_secret_survives_any_chunking(
            prefix in "[a-z ]{0,20}",
            suffix in "[a-z ]{0,20}",
            cuts in proptest::collection::vec(0usize..60, 0..6),
        ) {
            let secret = "S3CR3T-VALUE";
            let text = format!("{prefix}{secret}{suffix}{secret}");
            let bytes = text.as_bytes();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
            cuts.sort();
            let mut chunks = Vec::new();
            let mut from = 0;
            for cut in cuts {
                chunks.push(&bytes[from..cut]);
                from = cut;
            }
            chunks.push(&bytes[from..]);
            let out = masked(&[secret], &chunks);
            prop_assert_eq!(out, format!("{prefix}***{suffix}***").into_bytes());
        }
    }
}
