//! Keeping each lane's agent messages (a deployment's, see `pull::lane`) in stream order
//! while handling different lanes side by side, and holding them all back while a
//! takeover settles.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};

/// The most messages of one lane handed out together.
pub(super) const MAX_BATCH: usize = 32;

/// Messages taken from the consumer, in one lane per key: the first ones of a lane are
/// being handled (together), the others wait for them in stream order (a redelivered
/// message that comes late goes before the later ones still waiting).
#[derive(Debug)]
pub(super) struct Lanes<M> {
    lanes: HashMap<String, Lane<M>>,
    held: usize,
    /// While paused nothing new starts: messages are only taken in and put in order.
    paused: bool,
    /// Lanes that were idle when a message was taken in: what [`Lanes::start`] looks at.
    ready: Vec<String>,
}

/// One lane's messages: how many are being handled, and those waiting.
#[derive(Debug)]
struct Lane<M> {
    running: usize,
    /// Stream sequence and message, ascending.
    waiting: VecDeque<(u64, M)>,
}

impl<M> Default for Lanes<M> {
    fn default() -> Self {
        Self {
            lanes: HashMap::new(),
            held: 0,
            paused: false,
            ready: Vec::new(),
        }
    }
}

impl<M> Lane<M> {
    /// Hands out the first waiting messages, up to [`MAX_BATCH`], as being handled.
    fn take(&mut self) -> Option<Vec<M>> {
        if self.running > 0 || self.waiting.is_empty() {
            return None;
        }
        let n = self.waiting.len().min(MAX_BATCH);
        self.running = n;
        Some(self.waiting.drain(..n).map(|(_, m)| m).collect())
    }
}

impl<M> Lanes<M> {
    /// Takes `message` (stream sequence `seq`) of lane `key` in, in stream order; it
    /// is handed out by [`Lanes::start`] (its lane idle) or [`Lanes::done`] (once the
    /// messages before it are). A message already waiting with the same sequence
    /// (delivered again) is replaced: only the newest delivery can be acknowledged.
    pub(super) fn admit(&mut self, key: String, seq: u64, message: M) {
        let lane = match self.lanes.entry(key) {
            Entry::Occupied(lane) => lane.into_mut(),
            Entry::Vacant(lane) => {
                self.ready.push(lane.key().clone());
                lane.insert(Lane {
                    running: 0,
                    waiting: VecDeque::new(),
                })
            }
        };
        let at = lane.waiting.partition_point(|(s, _)| *s < seq);
        match lane.waiting.get_mut(at) {
            Some(same) if same.0 == seq => same.1 = message,
            _ => {
                self.held += 1;
                lane.waiting.insert(at, (seq, message));
            }
        }
    }

    /// Hands out, unless paused, the messages waiting in every lane that was idle when
    /// messages were taken in since the last call: each lane's first ones, together.
    pub(super) fn start(&mut self) -> Vec<(String, Vec<M>)> {
        if self.paused {
            return Vec::new();
        }
        let mut now = Vec::new();
        for key in std::mem::take(&mut self.ready) {
            if let Some(batch) = self.lanes.get_mut(&key).and_then(Lane::take) {
                now.push((key, batch));
            }
        }
        now
    }

    /// The messages being handled in lane `key` are done: returns the next ones of its
    /// lane, if any and nothing is paused.
    pub(super) fn done(&mut self, key: &str) -> Option<Vec<M>> {
        let lane = self.lanes.get_mut(key)?;
        self.held = self.held.saturating_sub(lane.running);
        lane.running = 0;
        if lane.waiting.is_empty() {
            self.lanes.remove(key);
            return None;
        }
        if self.paused {
            return None;
        }
        lane.take()
    }

    /// Starts nothing more until [`Lanes::resume`]; what runs finishes.
    pub(super) fn pause(&mut self) {
        self.paused = true;
    }

    /// Whether [`Lanes::pause`] holds.
    pub(super) fn paused(&self) -> bool {
        self.paused
    }

    /// Ends a pause: returns the first messages of every idle lane, to handle now.
    pub(super) fn resume(&mut self) -> Vec<(String, Vec<M>)> {
        self.paused = false;
        self.ready.clear();
        let mut now = Vec::new();
        for (key, lane) in &mut self.lanes {
            if let Some(batch) = lane.take() {
                now.push((key.clone(), batch));
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

    /// `lanes.start()`, sorted by lane.
    fn started<M>(lanes: &mut Lanes<M>) -> Vec<(String, Vec<M>)> {
        let mut now = lanes.start();
        now.sort_by(|a, b| a.0.cmp(&b.0));
        now
    }

    #[test]
    fn lanes_keep_each_subject_in_order_and_let_others_through() {
        let mut lanes = Lanes::default();
        lanes.admit("a".into(), 1, 1);
        assert_eq!(started(&mut lanes), [("a".into(), vec![1])]);
        lanes.admit("a".into(), 2, 2);
        lanes.admit("b".into(), 10, 10);
        assert_eq!(
            started(&mut lanes),
            [("b".into(), vec![10])],
            "2 waits behind 1; another lane goes"
        );
        lanes.admit("a".into(), 3, 3);
        assert_eq!(started(&mut lanes), []);
        assert_eq!(lanes.held(), 4);
        assert_eq!(lanes.done("b"), None);
        assert_eq!(
            lanes.done("a"),
            Some(vec![2, 3]),
            "what waited, together, in order"
        );
        assert_eq!(lanes.held(), 2);
        assert_eq!(lanes.done("a"), None);
        assert_eq!(lanes.held(), 0);
        lanes.admit("a".into(), 4, 4);
        assert_eq!(
            started(&mut lanes),
            [("a".into(), vec![4])],
            "the lane is idle again"
        );
    }

    #[test]
    fn messages_of_a_lane_taken_in_together_are_handed_out_together_up_to_a_batch() {
        let mut lanes = Lanes::default();
        for seq in 1..=(MAX_BATCH as u64 + 1) {
            lanes.admit("a".into(), seq, seq);
        }
        lanes.admit("b".into(), 100, 100);
        let now = started(&mut lanes);
        assert_eq!(now[0], ("a".into(), (1..=MAX_BATCH as u64).collect()));
        assert_eq!(now[1], ("b".into(), vec![100]));
        assert_eq!(lanes.done("a"), Some(vec![MAX_BATCH as u64 + 1]));
    }

    #[test]
    fn a_message_delivered_late_goes_before_the_later_ones_waiting_and_a_second_delivery_replaces_the_first()
     {
        let mut lanes = Lanes::default();
        lanes.admit("a".into(), 5, "5");
        assert_eq!(started(&mut lanes), [("a".into(), vec!["5"])]);
        lanes.admit("a".into(), 9, "9");
        lanes.admit("a".into(), 7, "7");
        lanes.admit("a".into(), 7, "7 again");
        assert_eq!(lanes.held(), 3, "a second delivery is not a second message");
        assert_eq!(lanes.done("a"), Some(vec!["7 again", "9"]));
        assert_eq!(lanes.done("a"), None);
    }

    #[test]
    fn paused_lanes_start_nothing_and_resume_with_the_first_of_each_in_stream_order() {
        let mut lanes = Lanes::default();
        lanes.admit("a".into(), 1, 1);
        assert_eq!(started(&mut lanes), [("a".into(), vec![1])]);
        lanes.pause();
        lanes.admit("b".into(), 12, 12);
        lanes.admit("b".into(), 11, 11);
        lanes.admit("a".into(), 3, 3);
        assert_eq!(started(&mut lanes), [], "paused");
        assert_eq!(lanes.done("a"), None, "what ran finishes; nothing starts");
        lanes.admit("a".into(), 2, 2);
        let mut now = lanes.resume();
        now.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(now, [("a".into(), vec![2, 3]), ("b".into(), vec![11, 12])]);
        assert_eq!(lanes.done("a"), None);
        assert_eq!(lanes.done("b"), None);
        assert_eq!(lanes.held(), 0);
        assert!(!lanes.paused());
    }
}
