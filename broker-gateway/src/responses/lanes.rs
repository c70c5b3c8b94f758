//! Keeping each server's agent messages in order while handling different servers'
//! side by side.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};

/// Messages taken from the consumer, in one lane per subject: the first of a lane is
/// being handled, the others wait for it in arrival order.
#[derive(Debug)]
pub(super) struct Lanes<M> {
    waiting: HashMap<String, VecDeque<M>>,
    held: usize,
}

impl<M> Default for Lanes<M> {
    fn default() -> Self {
        Self {
            waiting: HashMap::new(),
            held: 0,
        }
    }
}

impl<M> Lanes<M> {
    /// Takes `message` of `subject` in: returns it when its lane was idle (handle it
    /// now), else keeps it until the messages before it are done.
    pub(super) fn admit(&mut self, subject: String, message: M) -> Option<M> {
        self.held += 1;
        match self.waiting.entry(subject) {
            Entry::Occupied(mut lane) => {
                lane.get_mut().push_back(message);
                None
            }
            Entry::Vacant(lane) => {
                lane.insert(VecDeque::new());
                Some(message)
            }
        }
    }

    /// The message being handled on `subject` is done: returns the next one of its
    /// lane, if any.
    pub(super) fn done(&mut self, subject: &str) -> Option<M> {
        self.held = self.held.saturating_sub(1);
        let lane = self.waiting.get_mut(subject)?;
        let next = lane.pop_front();
        if next.is_none() {
            self.waiting.remove(subject);
        }
        next
    }

    /// Messages taken and not done yet.
    pub(super) fn held(&self) -> usize {
        self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_keep_each_subject_in_order_and_let_others_through() {
        let mut lanes = Lanes::default();
        assert_eq!(lanes.admit("a".into(), 1), Some(1));
        assert_eq!(lanes.admit("a".into(), 2), None, "waits behind 1");
        assert_eq!(lanes.admit("b".into(), 10), Some(10), "another server");
        assert_eq!(lanes.admit("a".into(), 3), None);
        assert_eq!(lanes.held(), 4);
        assert_eq!(lanes.done("b"), None);
        assert_eq!(lanes.done("a"), Some(2));
        assert_eq!(lanes.done("a"), Some(3));
        assert_eq!(lanes.done("a"), None);
        assert_eq!(lanes.held(), 0);
        assert_eq!(
            lanes.admit("a".into(), 4),
            Some(4),
            "the lane is idle again"
        );
    }
}
