//! Small shared helpers: Redis-exact number text conversions, glob matching, and OS error text.

pub mod numtext;

/// An OS error's text as C's strerror gives it (what Redis prints), without Rust's
/// " (os error N)" suffix.
pub(crate) fn strerror(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.rfind(" (os error ") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}
