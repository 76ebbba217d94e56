//! Text rules every layer shares: how a message is bounded and how a commit is abbreviated.
//!
//! A leaf module (no dependencies inside the crate), so the pure layers use it without reaching up.

/// The marker that ends a cut text.
pub const CUT_MARKER: char = '…';

/// Characters of a commit SHA shown in messages, events and generated hook names: git's default
/// abbreviation, and the one Argo CD shows and names hooks with.
pub const SHORT_SHA_LEN: usize = 7;

/// `text` bounded to at most `max` **bytes**: unchanged when it fits; otherwise cut on a character
/// boundary and ended with [`CUT_MARKER`], the marker counted inside the bound (for `max` below the
/// marker's 3 bytes the result is the marker alone).
///
/// Bytes, not characters, because every bound exists to keep what Capstan stores and sends small
/// (conditions and `lastError` in status, Event notes, error messages), and those limits are sizes.
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max.saturating_sub(CUT_MARKER.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{CUT_MARKER}", &text[..end])
}

/// The first [`SHORT_SHA_LEN`] characters of `sha` (all of it when shorter, or not ASCII there).
pub fn short_sha(sha: &str) -> &str {
    sha.get(..SHORT_SHA_LEN).unwrap_or(sha)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_bounds_bytes_with_the_marker_inside() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("exactly10!", 10), "exactly10!");
        assert_eq!(truncate("0123456789ab", 10), "0123456…");
        assert_eq!(truncate("", 0), "");
        // Multi-byte characters are never split, and the result never exceeds the bound.
        let long = "é".repeat(2000);
        let cut = truncate(&long, 1024);
        assert!(cut.len() <= 1024 && cut.ends_with(CUT_MARKER), "{}", cut.len());
        assert_eq!(truncate("héllo", 5), "h…");
        assert_eq!(truncate("héllo", 2), "…");
    }

    #[test]
    fn short_sha_is_seven_characters() {
        assert_eq!(short_sha("0123456789abcdef"), "0123456");
        assert_eq!(short_sha("abc"), "abc");
    }
}
