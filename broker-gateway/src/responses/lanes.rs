//! Keeping each lane's agent messages (a deployment's, see `pull::lane`) in stream order
//! while handling different lanes side by side, and holding them all back while a
//! takeover settles.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};

/// Messages taken from the consumer, in one lane per key: the first of a lane is
/// being handled, the others wait for it in stream order (a redelivered message that
/// comes late goes before the later ones still waiting).
#[derive(Debug)]
pub(super) struct Lanes<M> {
    lanes: HashMap<String, Lane<M>>,
    held: usize,
    /// While paused nothing new starts: messages are only taken in and put in order.
    paused: bool,
}

/// One lane's messages: whether its first is being handled, and those waiting.
#[derive(Debug)]
struct Lane<M> {
    running: bool,
    /// Stream sequence and message, ascending.
    waiting: VecDeque<(u64, M)>,
}

impl<M> Default for Lanes<M> {
    fn default() -> Self {
        Self {
            lanes: HashMap::new(),
            held: 0,
            paused: false,
        }
    }
}

impl<M> Lanes<M> {
    /// Takes `message` (stream sequence `seq`) of lane `key` in: returns it when its lane
    /// was idle and nothing is paused (handle it now), else keeps it in stream order until
    /// the messages before it are done. A message already waiting with the same sequence
    /// (delivered again) is replaced: only the newest delivery can be acknowledged.
    pub(super) fn admit(&mut self, key: String, seq: u64, message: M) -> Option<M> {
        let lane = match self.lanes.entry(key) {
            Entry::Occupied(lane) => lane.into_mut(),
            Entry::Vacant(lane) => lane.insert(Lane {
                running: false,
                waiting: VecDeque::new(),
            }),
        };
        let at = lane.waiting.partition_point(|(s, _)| *s < seq);
        match lane.waiting.get_mut(at) {
            Some(same) if same.0 == seq => same.1 = message,
            _ => {
                self.held += 1;
                lane.waiting.insert(at, (seq, message));
            }
        }
        if self.paused || lane.running {
            return None;
        }
        lane.running = true;
        lane.waiting.pop_front().map(|(_, m)| m)
    }

    /// The message being handled in lane `key` is done: returns the next one of its
    /// lane, if any and nothing is paused.
    pub(super) fn done(&mut self, key: &str) -> Option<M> {
        self.held = self.held.saturating_sub(1);
        let lane = self.lanes.get_mut(key)?;
        lane.running = false;
        if lane.waiting.is_empty() {
            self.lanes.remove(key);
            return None;
        }
        if self.paused {
            return None;
        }
        lane.running = true;
        lane.waiting.pop_front().map(|(_, m)| m)
    }

    /// Starts nothing more until [`Lanes::resume`]; what runs finishes.
    pub(super) fn pause(&mut self) {
        self.paused = true;
    }

    /// Whether [`Lanes::pause`] holds.
    pub(super) fn paused(&self) -> bool {
        self.paused
    }

    /// Ends a pause: returns the first message of every idle lane, to handle now.
    pub(super) fn resume(&mut self) -> Vec<M> {
        self.paused = false;
        let mut now = Vec::new();
        for lane in self.lanes.values_mut().filter(|l| !l.running) {
            if let Some((_, m)) = lane.waiting.pop_front() {
                lane.running = true;
                now.push(m);
            }
        }
        now
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
        assert_eq!(lanes.admit("a".into(), 1, 1), Some(1));
        assert_eq!(lanes.admit("a".into(), 2, 2), None, "waits behind 1");
        assert_eq!(lanes.admit("b".into(), 10, 10), Some(10), "another server");
        assert_eq!(lanes.admit("a".into(), 3, 3), None);
        assert_eq!(lanes.held(), 4);
        assert_eq!(lanes.done("b"), None);
        assert_eq!(lanes.done("a"), Some(2));
        assert_eq!(lanes.done("a"), Some(3));
        assert_eq!(lanes.done("a"), None);
        assert_eq!(lanes.held(), 0);
        assert_eq!(
            lanes.admit("a".into(), 4, 4),
            Some(4),
            "the lane is idle again"
        );
    }

    #[test]
    fn a_message_delivered_late_goes_before_the_later_ones_waiting_and_a_second_delivery_replaces_the_first()
     {
        let mut lanes = Lanes::default();
        assert_eq!(lanes.admit("a".into(), 5, "5"), Some("5"));
        assert_eq!(lanes.admit("a".into(), 9, "9"), None);
        assert_eq!(lanes.admit("a".into(), 7, "7"), None, "came back late");
        assert_eq!(lanes.admit("a".into(), 7, "7 again"), None);
        assert_eq!(lanes.held(), 3, "a second delivery is not a second message");
        assert_eq!(lanes.done("a"), Some("7 again"));
        assert_eq!(lanes.done("a"), Some("9"));
        assert_eq!(lanes.done("a"), None);
    }

    #[test]
    fn paused_lanes_start_nothing_and_resume_with_the_first_of_each_in_stream_order() {
        let mut lanes = Lanes::default();
        assert_eq!(lanes.admit("a".into(), 1, 1), Some(1));
        lanes.pause();
        assert_eq!(lanes.admit("b".into(), 12, 12), None, "paused");
        assert_eq!(lanes.admit("b".into(), 11, 11), None);
        assert_eq!(lanes.admit("a".into(), 3, 3), None);
        assert_eq!(lanes.done("a"), None, "what ran finishes; nothing starts");
        assert_eq!(lanes.admit("a".into(), 2, 2), None);
        let mut now = lanes.resume();
        now.sort_unstable();
        assert_eq!(now, [2, 11]);
        assert_eq!(lanes.done("a"), Some(3));
        assert_eq!(lanes.done("b"), Some(12));
        assert!(!lanes.paused());
    }
}
