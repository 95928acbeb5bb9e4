//! List values (placeholder until the list type lands).
#[derive(Clone, Default)]
pub struct List {
    pub items: std::collections::VecDeque<Vec<u8>>,
}
