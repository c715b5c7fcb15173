//! The memory behind the checks asked in the background (a leaf's `LeafChecks`, the
//! host's `Grants`): each question remembered with its answer, asked through a bounded
//! queue. Questions come from pods, and pods (what-ifs above all) are written by users: a
//! what-if naming thousands of objects must neither grow the agent's memory nor queue
//! thousands of requests to a leaf, nor push out what live pods wait on.
//!
//! - The queue holds at most `Limits::queue` questions; a question that finds it full is
//!   dropped (counted), stays unknown and is asked on the next tick.
//! - At most `Limits::entries` questions are remembered; past that the least recently
//!   wanted is forgotten (counted), a what-if's before any live pod's.
//! - What-ifs' questions are a class of their own, at most `Limits::what_if_entries`:
//!   asked once, not asked again every tick and forgotten a tick after they were last
//!   wanted, so that a what-if costs its own answers and no live pod's place. A live pod
//!   wanting one makes it live.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;
// tokio's clock, so that tests in paused time can step over ticks and forgetting.
use tokio::time::Instant;

/// Who wants an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asker {
    /// A scheduling cycle of a pod that exists, or pod sync.
    Live,
    /// A dry run (a what-if, an explanation): answered once, remembered briefly.
    WhatIf,
}

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Questions waiting to be asked.
    pub queue: usize,
    /// Questions remembered, of both classes.
    pub entries: usize,
    /// Of those, questions only what-ifs wanted.
    pub what_if_entries: usize,
    /// A live answer is asked again this long after it was given...
    pub recheck: Duration,
    /// ...as long as it was wanted within this long.
    pub forget_after: Duration,
}

struct Entry {
    answer: Option<bool>,
    checked: Option<Instant>,
    wanted: Instant,
    live: bool,
    /// Position in its class's order of wanting (`Memory::live` or `Memory::what_if`).
    seq: u64,
}

struct Memory<K> {
    entries: HashMap<K, Entry>,
    /// Least recently wanted first, by class.
    live: BTreeMap<u64, K>,
    what_if: BTreeMap<u64, K>,
    next: u64,
}

impl<K: Clone + Eq + Hash> Memory<K> {
    fn order(&mut self, live: bool) -> &mut BTreeMap<u64, K> {
        if live {
            &mut self.live
        } else {
            &mut self.what_if
        }
    }

    /// Marks `k` wanted now, in class `live`.
    fn touch(&mut self, k: &K, live: bool, now: Instant) {
        let seq = self.next;
        self.next += 1;
        let Some(e) = self.entries.get_mut(k) else {
            return;
        };
        let (old_seq, old_live) = (e.seq, e.live);
        e.seq = seq;
        e.live = live;
        e.wanted = now;
        self.order(old_live).remove(&old_seq);
        self.order(live).insert(seq, k.clone());
    }

    fn remove(&mut self, k: &K) {
        if let Some(e) = self.entries.remove(k) {
            self.order(e.live).remove(&e.seq);
        }
    }

    /// Forgets the least recently wanted of a class; false when it has none.
    fn evict_oldest(&mut self, live: bool) -> bool {
        match self.order(live).pop_first() {
            Some((_, k)) => {
                self.entries.remove(&k);
                true
            }
            None => false,
        }
    }

    /// Remembers `k` (unknown), making room first; how many were forgotten for it.
    fn insert(&mut self, k: K, live: bool, now: Instant, limits: &Limits) -> u64 {
        let mut evicted = 0;
        if !live {
            while self.what_if.len() >= limits.what_if_entries.max(1) && self.evict_oldest(false) {
                evicted += 1;
            }
        }
        while self.entries.len() >= limits.entries.max(1)
            && (self.evict_oldest(false) || self.evict_oldest(true))
        {
            evicted += 1;
        }
        let seq = self.next;
        self.next += 1;
        self.order(live).insert(seq, k.clone());
        self.entries.insert(
            k,
            Entry {
                answer: None,
                checked: None,
                wanted: now,
                live,
                seq,
            },
        );
        evicted
    }
}

pub struct CheckMemory<K> {
    limits: Limits,
    memory: Mutex<Memory<K>>,
    ask: mpsc::Sender<K>,
    asked: Mutex<Option<mpsc::Receiver<K>>>,
    dropped: Counter,
    evicted: Counter,
}

impl<K: Clone + Eq + Hash + Ord> CheckMemory<K> {
    /// `dropped` counts questions the full queue turned away, `evicted` those forgotten
    /// to make room.
    pub fn new(limits: Limits, dropped: Counter, evicted: Counter) -> Self {
        let (ask, asked) = mpsc::channel(limits.queue.max(1));
        CheckMemory {
            limits,
            memory: Mutex::new(Memory {
                entries: HashMap::new(),
                live: BTreeMap::new(),
                what_if: BTreeMap::new(),
                next: 0,
            }),
            ask,
            asked: Mutex::new(Some(asked)),
            dropped,
            evicted,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Memory<K>> {
        self.memory.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The answer if known; otherwise None, and the question is asked (when new to the
    /// memory). A what-if reads a live pod's answer without touching it.
    pub(crate) fn want(&self, k: &K, asker: Asker) -> Option<bool> {
        let now = Instant::now();
        let live = asker == Asker::Live;
        let mut memory = self.lock();
        if let Some(e) = memory.entries.get(k) {
            let answer = e.answer;
            if live || !e.live {
                memory.touch(k, live, now);
            }
            return answer;
        }
        let evicted = memory.insert(k.clone(), live, now, &self.limits);
        drop(memory);
        self.evicted.inc_by(evicted);
        if self.ask.try_send(k.clone()).is_err() {
            // Full (or no one answers any more): the question stays unknown, and the next
            // tick asks it if it is still remembered.
            self.dropped.inc();
        }
        None
    }

    /// The answer if known, without asking: for a second look within a cycle that
    /// already asked with [`CheckMemory::want`].
    pub(crate) fn known(&self, k: &K) -> Option<bool> {
        self.lock().entries.get(k).and_then(|e| e.answer)
    }

    /// Records an answer to a question still remembered; true when it is the first or
    /// a change. An answer to a forgotten question is dropped, not remembered again.
    pub fn record(&self, k: &K, answer: bool) -> bool {
        let mut memory = self.lock();
        let Some(e) = memory.entries.get_mut(k) else {
            return false;
        };
        let changed = e.answer != Some(answer);
        e.answer = Some(answer);
        e.checked = Some(Instant::now());
        changed
    }

    /// Remembers an answer found otherwise (pod sync met it while writing), as live.
    pub(crate) fn learned(&self, k: K, answer: bool) -> bool {
        let now = Instant::now();
        let mut memory = self.lock();
        if memory.entries.contains_key(&k) {
            memory.touch(&k, true, now);
        } else {
            let evicted = memory.insert(k.clone(), true, now, &self.limits);
            self.evicted.inc_by(evicted);
        }
        drop(memory);
        self.record(&k, answer)
    }

    /// The queue's receiving end, once.
    pub fn take_receiver(&self) -> Option<mpsc::Receiver<K>> {
        self.asked.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Whether `k` is remembered and still unanswered: a queued question forgotten since
    /// is not asked.
    pub fn unanswered(&self, k: &K) -> bool {
        self.lock()
            .entries
            .get(k)
            .is_some_and(|e| e.answer.is_none())
    }

    /// At a tick: forgets what is no longer wanted and returns what to ask — live answers
    /// gone stale, and every question not answered yet (those the full queue dropped).
    pub fn due(&self) -> BTreeSet<K> {
        let now = Instant::now();
        let (recheck, forget_after) = (self.limits.recheck, self.limits.forget_after);
        let mut memory = self.lock();
        let gone: Vec<K> = memory
            .entries
            .iter()
            .filter(|(_, e)| {
                let keep = if e.live { forget_after } else { recheck };
                now.duration_since(e.wanted) >= keep
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in &gone {
            memory.remove(k);
        }
        memory
            .entries
            .iter()
            .filter(|(_, e)| match e.checked {
                None => true,
                Some(c) => e.live && now.duration_since(c) >= recheck,
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// How many questions are remembered, and how many of them only what-ifs wanted.
    #[cfg(test)]
    pub(crate) fn remembered(&self) -> (usize, usize) {
        let memory = self.lock();
        (memory.entries.len(), memory.what_if.len())
    }

    /// How many questions wait in the queue.
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        self.ask.max_capacity() - self.ask.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(queue: usize, entries: usize, what_if_entries: usize) -> CheckMemory<u32> {
        CheckMemory::new(
            Limits {
                queue,
                entries,
                what_if_entries,
                recheck: Duration::from_secs(30),
                forget_after: Duration::from_secs(600),
            },
            Counter::default(),
            Counter::default(),
        )
    }

    #[test]
    fn the_least_recently_wanted_is_forgotten_first() {
        let m = memory(10, 3, 3);
        for k in [1, 2, 3] {
            assert_eq!(m.want(&k, Asker::Live), None);
        }
        m.want(&1, Asker::Live);
        m.want(&4, Asker::Live);
        assert!(m.unanswered(&1), "wanted again, so kept");
        assert!(!m.unanswered(&2), "least recently wanted, so forgotten");
        assert_eq!(m.remembered(), (3, 0));
        assert_eq!(m.evicted.get(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn what_ifs_answers_are_not_asked_again_and_soon_forgotten() {
        let m = memory(10, 10, 10);
        m.want(&1, Asker::Live);
        m.want(&2, Asker::WhatIf);
        m.record(&1, true);
        m.record(&2, true);
        assert_eq!(
            m.want(&2, Asker::WhatIf),
            Some(true),
            "a repeat is answered"
        );
        tokio::time::advance(Duration::from_secs(31)).await;
        m.want(&1, Asker::Live);
        assert_eq!(
            m.due(),
            BTreeSet::from([1]),
            "only the live answer is asked again"
        );
        assert_eq!(m.remembered(), (1, 0), "the what-if's answer is forgotten");
    }

    #[test]
    fn a_live_pod_makes_a_what_ifs_question_live() {
        let m = memory(10, 10, 1);
        m.want(&1, Asker::WhatIf);
        m.want(&1, Asker::Live);
        m.want(&2, Asker::WhatIf);
        assert!(
            m.unanswered(&1),
            "live now, so not the what-ifs' to push out"
        );
        assert_eq!(m.remembered(), (2, 1));
    }
}
